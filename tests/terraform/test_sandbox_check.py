"""tests/rehearsal/sandbox_check.py, the rehearsal's sandbox stage: the
filter is expanded as systemd expands it, and real strace recordings of
calls and writes outside a unit's sandbox are reported by name."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tfmodel import DEPLOY, REPO

sys.path.insert(0, str(REPO / "tests" / "rehearsal"))

import sandbox_check as sc  # noqa: E402

CHECKER = REPO / "tests" / "rehearsal" / "sandbox_check.py"
UNIT = DEPLOY / "relay-server.service"

GROUPS = {
    "@default": ["execve", "exit"],
    "@system-service": ["@default", "@basic-io", "@setuid", "capset"],
    "@basic-io": ["read", "write"],
    "@setuid": ["setuid", "setgid"],
    "@privileged": ["@chown", "capset", "setuid", "chroot"],
    "@chown": ["fchownat"],
}


def test_syscall_filter_listing_is_parsed_with_nested_groups():
    listing = """@basic-io
    # Basic IO
    read
    write

@system-service
    # General system service operations
    @basic-io
    capset

@default
    # always permitted
    execve

# Unlisted system calls (supported by the local kernel, but not included in any of the groups listed above):
#   kexec_load
"""
    groups = sc.syscall_groups(listing)
    assert groups["@system-service"] == ["@basic-io", "capset"]
    assert sc.expand("@system-service", groups) == {"read", "write", "capset"}


def test_allow_list_minus_deny_list_plus_default():
    d = {"SystemCallFilter": ["@system-service", "~@privileged"]}
    allow = sc.allowed_syscalls(d, GROUPS)
    assert allow == {"execve", "exit", "read", "write", "setgid"}


def test_later_lines_add_and_an_empty_one_resets():
    d = {"SystemCallFilter": ["@basic-io", "", "chroot", "fchownat:EPERM", "~chroot"]}
    assert sc.allowed_syscalls(d, GROUPS) == {"execve", "exit", "fchownat"}


@pytest.mark.parametrize("filters", [[], ["~@privileged"]])
def test_no_allow_list_is_an_input_error(filters):
    with pytest.raises(sc.InputError):
        sc.allowed_syscalls({"SystemCallFilter": filters} if filters else {}, GROUPS)


def test_writable_paths_follow_the_unit():
    d = sc.unit_directives([UNIT])
    roots = sc.writable_paths(d)
    assert "/var/lib/blob-relay" in roots and "/run/blob-relay" in roots and "/tmp" in roots
    assert not sc.under("/etc/blob-relay/tokens", roots)
    assert sc.under("/run/blob-relay/cert-sha256", roots)
    assert not sc.under("/run/blob-relay-other", roots)


def test_strace_lines_with_unfinished_calls_and_relative_paths(tmp_path):
    log = tmp_path / "log"
    log.write_text(
        "10 execve(\"/bin/x\", [\"x\"], 0x1 /* 1 vars */) = 0\n"
        "10 openat(AT_FDCWD</srv>, \"a\", O_WRONLY|O_CREAT|O_TRUNC, 0666 <unfinished ...>\n"
        "11 futex(0x1, FUTEX_WAIT, 0, NULL <unfinished ...>\n"
        "10 <... openat resumed>) = 3</srv/a>\n"
        "10 chdir(\"/etc\") = 0\n"
        "10 clone(child_stack=NULL, flags=SIGCHLD) = 12\n"
        "12 mkdir(\"blob-relay\", 0755) = -1 EEXIST (File exists)\n"
        "10 openat(AT_FDCWD</etc>, \"/etc/passwd\", O_RDONLY|O_CLOEXEC) = 4</etc/passwd>\n"
        "10 renameat2(AT_FDCWD</etc>, \"x.new\", 5</run/q>, \"x\", RENAME_NOREPLACE) = 0\n"
        "11 <... futex resumed>) = 0\n"
        "10 --- SIGTERM {si_signo=SIGTERM, si_code=SI_USER, si_pid=1} ---\n"
    )
    rec = sc.read_recording(log)
    assert rec.syscalls == {"execve": 1, "openat": 2, "futex": 1, "chdir": 1, "clone": 1, "mkdir": 1, "renameat2": 1}
    assert [w[0] for w in rec.writes] == ["/srv/a", "/etc/blob-relay", "/etc/x.new", "/run/q/x"]


def strace_or_skip():
    for tool in ("strace", "systemd-analyze"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not installed")


def run_checker(*args):
    return subprocess.run([sys.executable, str(CHECKER), "check", *map(str, args)], capture_output=True, text=True)


def record(tmp_path, script):
    """A real recording: `strace -f -qq -y` of a shell script."""
    log = tmp_path / "strace.log"
    r = subprocess.run(["strace", "-f", "-qq", "-y", "-o", str(log), "sh", "-c", script], capture_output=True)
    assert log.stat().st_size > 0, r.stderr
    return log


def test_a_recorded_call_outside_the_filter_is_reported_by_name(tmp_path):
    strace_or_skip()
    # chroot is in @system-service's @privileged, which the relay's unit takes
    # away; swapoff is in no group @system-service includes. Both fail here
    # (no such path): the calls are recorded all the same.
    log = record(tmp_path, "python3 -c 'import ctypes; c = ctypes.CDLL(None); "
                 "c.chroot(b\"/nonexistent\"); c.swapoff(b\"/nonexistent\")'")
    r = run_checker("--label", "relay", UNIT, log)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "relay: system call chroot (called 1 times) is outside the unit's SystemCallFilter" in r.stderr
    assert "relay: system call swapoff (called 1 times) is outside" in r.stderr


def test_a_recorded_write_outside_the_writable_paths_is_reported(tmp_path):
    strace_or_skip()
    # The relay's unit without PrivateTmp=, so that tmp_path (under /tmp) is
    # outside what it leaves writable.
    unit = tmp_path / "relay-server.service"
    unit.write_text(UNIT.read_text().replace("PrivateTmp=yes", "PrivateTmp=no"))
    log = record(tmp_path, f"echo x > {tmp_path}/out; cd {tmp_path} && mkdir d")
    r = run_checker("--writes", unit, log)
    assert r.returncode == 1, r.stdout
    assert f"writes {tmp_path}/out (openat = 3<{tmp_path}/out>), outside" in r.stderr
    assert f"writes {tmp_path}/d (mkdir = 0), outside" in r.stderr
    assert "writes /dev/null" not in r.stderr


def test_a_program_inside_the_sandbox_passes(tmp_path):
    strace_or_skip()
    log = record(tmp_path, "cat /etc/hostname > /dev/null")
    r = run_checker("--writes", "--label", "cat", UNIT, log)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("cat: ") and "all allowed by SystemCallFilter" in r.stdout


def test_every_deployed_unit_that_runs_a_program_has_a_filter():
    """The units whose recordings the sandbox stage checks."""
    for name in ("relay-server.service", "blob-relay-fetch@.service", "blob-relay-tokens.service"):
        d = sc.unit_directives([DEPLOY / name])
        assert d.get("SystemCallFilter"), name
        assert d.get("SystemCallArchitectures") == ["native"], name


def test_sockets_mappings_and_namespaces_the_unit_forbids_are_reported(tmp_path):
    strace_or_skip()
    # A packet socket (RestrictAddressFamilies= has no AF_PACKET), a writable
    # and executable mapping (MemoryDenyWriteExecute=yes) and a new user
    # namespace (RestrictNamespaces=yes). Refused or not here, each is recorded.
    log = record(tmp_path, "python3 -c 'import mmap, socket\n"
                 "try:\n    socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\nexcept OSError:\n    pass\n"
                 "mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)'; "
                 "unshare --user true 2>/dev/null; true")
    r = run_checker("--label", "relay", UNIT, log)
    assert r.returncode == 1
    assert "relay: socket(AF_PACKET) outside RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK" in r.stderr
    assert "relay: mmap(PROT_WRITE|PROT_EXEC), refused under MemoryDenyWriteExecute=yes" in r.stderr
    assert "relay: unshare into a new namespace, refused under RestrictNamespaces=yes" in r.stderr
