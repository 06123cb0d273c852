"""A VM of the rehearsal: a network namespace (its own interfaces, routes and
169.254.169.254) plus a persistent mount namespace in which /etc, /usr (with
/usr/local), /var/lib, /var/log, /var/cache, /root and /home are overlays on
the host's (writes land in the VM's own tmpfs, the host's files are never
changed: dpkg installing the relay's package writes /usr/bin, /usr/lib,
/var/lib/dpkg, /var/log/dpkg.log and its triggers /var/cache) and /tmp,
/var/tmp, /mnt and /run are empty tmpfs. /proc/sys is read-only inside: the kernel is shared
with the host, so a VM must not change global sysctls.

Everything a VM runs enters both namespaces with nsenter; nothing uses
`ip netns exec` (it would make a mount namespace of its own).
"""

from __future__ import annotations

import base64
import grp
import os
import pwd
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

# Network namespace names carry this run's id, so a second rehearsal on the
# machine, or the leftovers of a killed one, never collide with this run's.
# Set by the first process; the ones it starts inherit it.
RUN_ID = os.environ.setdefault("REHEARSAL_RUN_ID", f"{os.getpid():x}")


def ns_name(name: str) -> str:
    """The network namespace of `name` (wan, balancer, storage, a VM) in this run."""
    return f"rh{RUN_ID}-{name}"

# /usr before /usr/local: an overlay hides what is mounted below it, and the
# second one's lower layer is then the first one's view.
OVERLAYS = ["etc", "usr", "usr/local", "var/lib", "var/log", "var/cache", "root", "home"]
TMPFS = ["tmp", "var/tmp", "mnt"]  # and /run, mounted first


def sh(*args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, **kw)


@dataclass
class Vm:
    name: str  # relay-1, relay-2, bench, storage, balancer
    run_dir: Path  # the rehearsal's private run directory (host side)
    addresses: list[str] = field(default_factory=list)

    @property
    def netns(self) -> str:
        return ns_name(self.name)

    @property
    def mnt(self) -> Path:
        return self.run_dir / "ns" / f"{self.name}.mnt"

    def nsenter(self, mount: bool = True) -> list[str]:
        cmd = ["nsenter", f"--net=/run/netns/{self.netns}"]
        if mount:
            cmd.append(f"--mount={self.mnt}")
        return cmd

    def run(self, cmd: str, check: bool = True, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        """A shell command inside the VM (both namespaces), as root."""
        full = [*self.nsenter(), "/bin/sh", "-c", cmd]
        r = subprocess.run(full, capture_output=True, text=True, env=env, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"{self.name}: `{cmd}` exited {r.returncode}: {r.stderr.strip()}")
        return r

    def create_mounts(self) -> None:
        """The persistent mount namespace with the overlays described above."""
        self.mnt.touch()
        sh("unshare", f"--mount={self.mnt}", "--propagation", "private", "true")
        scratch = self.run_dir / "vm" / self.name
        scratch.mkdir(parents=True, exist_ok=True)
        # /run first: the scratch tmpfs (under the host's /run) is then made
        # inside the VM's own /run, where the VM (and the key scan) can see it.
        lines = ["set -e", f"mount -t tmpfs -o mode=0755 rh-{self.name} /run", f"mkdir -p {scratch}",
                 f"mount -t tmpfs -o mode=0700 rh-{self.name} {scratch}"]
        for d in OVERLAYS:
            up, work = f"{scratch}/upper/{d}", f"{scratch}/work/{d}"
            lines += [f"mkdir -p {up} {work}",
                      f"mount -t overlay rh-{self.name}-{d.replace('/', '-')} "
                      f"-o lowerdir=/{d},upperdir={up},workdir={work} /{d}"]
        for d in TMPFS:
            lines.append(f"mount -t tmpfs -o mode={'1777' if 'tmp' in d else '0755'} rh-{self.name} /{d}")
        lines += ["mount --bind /proc/sys /proc/sys", "mount -o remount,bind,ro /proc/sys"]
        subprocess.run(["nsenter", f"--mount={self.mnt}", "/bin/sh", "-c", "\n".join(lines)], check=True)

    def write_file(self, path: str, data: bytes, mode: int = 0o644, owner: str = "root:root") -> None:
        """Writes a file inside the VM (its mount namespace), like cloud-init's
        write_files: parent directories made, then owner and mode."""
        user, _, group = owner.partition(":")
        cmd = (f"mkdir -p {shlex.quote(os.path.dirname(path))} && cat > {shlex.quote(path)} && "
               f"chown {shlex.quote(user)}:{shlex.quote(group or user)} {shlex.quote(path)} && "
               f"chmod {mode:o} {shlex.quote(path)}")
        r = subprocess.run([*self.nsenter(), "/bin/sh", "-c", cmd], input=data, capture_output=True)
        if r.returncode != 0:
            raise RuntimeError(f"{self.name}: write {path}: {r.stderr.decode().strip()}")

    def read_file(self, path: str) -> bytes:
        r = subprocess.run([*self.nsenter(), "cat", path], capture_output=True)
        if r.returncode != 0:
            raise FileNotFoundError(f"{self.name}:{path}: {r.stderr.decode().strip()}")
        return r.stdout


def apply_write_files(vm: Vm, cfg: dict) -> list[str]:
    """cloud-init's write_files module: every entry, decoded, with its owner and
    permissions. Returns the paths written."""
    written = []
    for entry in cfg.get("write_files", []):
        content = entry.get("content", "")
        enc = entry.get("encoding", "")
        if enc in ("b64", "base64"):
            data = base64.b64decode(content)
        elif enc in ("", "text/plain"):
            data = content.encode()
        else:
            raise ValueError(f"write_files encoding {enc!r} is not handled by the rehearsal")
        vm.write_file(entry["path"], data, int(str(entry.get("permissions", "0644")), 8),
                      entry.get("owner", "root:root"))
        written.append(entry["path"])
    return written


def runcmd_lines(cfg: dict) -> list[str]:
    """cloud-init's runcmd as the shell lines it writes into its runcmd script: a
    list entry is quoted word by word, a string entry is taken as is."""
    out = []
    for c in cfg.get("runcmd", []):
        out.append(" ".join(shlex.quote(str(w)) for w in c) if isinstance(c, list) else str(c))
    return out


# What the relay-server and relay-client packages install: none of it may
# reach the host when a VM's dpkg installs them.
PACKAGE_PATHS = ["/usr/bin/relay-server", "/usr/bin/relay-client", "/usr/sbin/blob-relay-fetch",
                 "/usr/lib/systemd/system/relay-server.service", "/usr/lib/systemd/system/blob-relay-tokens.timer",
                 "/usr/lib/sysusers.d/blob-relay.conf", "/usr/lib/sysctl.d/60-blob-relay.conf",
                 "/var/lib/dpkg/info/relay-server.list", "/var/lib/dpkg/info/relay-client.list"]


def host_has_no_package() -> list[str]:
    """The package files (and dpkg status entries) on the host: empty unless
    a VM's dpkg reached it."""
    found = [p for p in PACKAGE_PATHS if os.path.lexists(p)]
    status = Path("/var/lib/dpkg/status")
    if status.exists():
        text = status.read_text(errors="replace")
        found += [f"dpkg status: {p}" for p in ("relay-server", "relay-client") if f"\nPackage: {p}\n" in "\n" + text]
    return found


def host_has_no(user: str) -> bool:
    """For the assertion that a VM's useradd never reached the host."""
    try:
        pwd.getpwnam(user)
        return False
    except KeyError:
        pass
    try:
        grp.getgrnam(user)
        return False
    except KeyError:
        return True
