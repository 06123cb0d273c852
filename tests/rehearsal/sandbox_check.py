#!/usr/bin/env python3
"""Holds a recorded run of a program against its systemd unit's sandbox.

The unit's sandbox is data: its `SystemCallFilter=` lines, expanded the way
systemd expands them (`systemd-analyze syscall-filter` lists every group;
groups nest), and the paths `ProtectSystem=strict` leaves writable
(`StateDirectory=`, `RuntimeDirectory=`, `PrivateTmp=`, ...). A recording is
`strace -f -qq -y -o LOG` of the program as the unit runs it. This script
reads both and names every system call outside the filter, every socket
family outside RestrictAddressFamilies=, every mapping
MemoryDenyWriteExecute= refuses, every new namespace RestrictNamespaces=
refuses, and (--writes) every path written outside the writable set.

    sandbox_check.py check UNIT[,DROPIN...] LOG [--writes] [--label NAME]
    sandbox_check.py allowed UNIT[,DROPIN...]          (the expanded filter)

`check` prints one line (`LABEL: N distinct syscalls recorded, all allowed
...`) and exits 0, or lists each violation on stderr and exits 1; 2 for a
usage or input error (no filter to check against, an empty log). Standard
library only: it runs on a fresh machine with python3.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path


class InputError(Exception):
    """The unit or the log cannot be checked (not a violation: a broken input)."""


# --- the unit ----------------------------------------------------------------


def unit_directives(paths: list[Path]) -> dict[str, list[str]]:
    """Every `Key=value` of the unit and its drop-ins, in order (later files
    after earlier ones, as systemd reads them). An empty assignment is kept:
    for list settings it resets what came before."""
    out: dict[str, list[str]] = {}
    for path in paths:
        for raw in path.read_text().splitlines():
            line = raw.strip()
            if not line or line.startswith(("#", ";", "[")):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise InputError(f"{path}: not a Key=value line: {raw!r}")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def syscall_groups(listing: str) -> dict[str, list[str]]:
    """Parses `systemd-analyze syscall-filter` (no arguments): `@group` at the
    start of a line, its members indented below, `#` lines are comments (the
    trailing list of calls in no group among them)."""
    groups: dict[str, list[str]] = {}
    current: str | None = None
    for raw in listing.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not raw[0].isspace():
            if not line.startswith("@"):
                raise InputError(f"syscall-filter: unexpected line {raw!r}")
            current = line
            groups[current] = []
        elif current is None:
            raise InputError(f"syscall-filter: member before any group: {raw!r}")
        else:
            groups[current].append(line)
    if "@system-service" not in groups or "@default" not in groups:
        raise InputError("syscall-filter: no @system-service or @default group (is this systemd?)")
    return groups


def expand(name: str, groups: dict[str, list[str]], seen: tuple[str, ...] = ()) -> set[str]:
    """A group's system calls with nested groups expanded; a plain name is itself."""
    if not name.startswith("@"):
        return {name}
    if name not in groups:
        raise InputError(f"unknown system call group {name}")
    if name in seen:
        raise InputError(f"system call groups nest in a loop: {' -> '.join(seen + (name,))}")
    out: set[str] = set()
    for member in groups[name]:
        out |= expand(member, groups, seen + (name,))
    return out


def allowed_syscalls(directives: dict[str, list[str]], groups: dict[str, list[str]]) -> set[str]:
    """What `SystemCallFilter=` lets through, as systemd.exec(5) and its
    parser define it: the first non-empty assignment decides the mode (a list
    without `~` is an allow list, and systemd then adds @default to it);
    later lines add to it, or with `~` take away; an empty assignment resets.
    Only allow lists are supported: a deny-only filter says nothing a
    recording could be checked against."""
    allow: set[str] | None = None
    for value in directives.get("SystemCallFilter", []):
        if not value:
            allow = None
            continue
        deny = value.startswith("~")
        names = value.lstrip("~").split()
        calls: set[str] = set()
        for n in names:
            # `name:errno` sets a per-call error number; the name is what matters.
            calls |= expand(n.split(":", 1)[0], groups)
        if allow is None:
            if deny:
                raise InputError("SystemCallFilter= starts with ~ (a deny list): nothing to check against")
            allow = expand("@default", groups) | calls
        elif deny:
            allow -= calls
        else:
            allow |= calls
    if allow is None:
        raise InputError("the unit has no SystemCallFilter=")
    return allow


def writable_paths(directives: dict[str, list[str]]) -> list[str]:
    """What a service may write under ProtectSystem=strict: its own
    directories under /var/lib, /run, /var/cache, /var/log and /etc (when it
    declares them), the private /tmp and /var/tmp of PrivateTmp=, the
    character devices PrivateDevices= gives it, and ReadWritePaths=."""

    def one(key: str) -> str | None:
        values = directives.get(key, [])
        return values[-1] if values else None

    if one("ProtectSystem") != "strict":
        raise InputError(f"ProtectSystem={one('ProtectSystem')}: the write check assumes strict")
    out: list[str] = []
    bases = {
        "StateDirectory": "/var/lib",
        "RuntimeDirectory": "/run",
        "CacheDirectory": "/var/cache",
        "LogsDirectory": "/var/log",
        "ConfigurationDirectory": "/etc",
    }
    for key, base in bases.items():
        for value in directives.get(key, []):
            out += [f"{base}/{d.split(':', 1)[0]}" for d in value.split()]
    if one("PrivateTmp") == "yes":
        out += ["/tmp", "/var/tmp"]
    if one("PrivateDevices") == "yes":
        # The pseudo devices of the private /dev (no real hardware).
        out += ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"]
    for value in directives.get("ReadWritePaths", []):
        out += [p.lstrip("-+") for p in value.split()]
    return out


# --- the recording -----------------------------------------------------------

# `PID name(` or `PID <... name resumed>`; strace prints unknown calls as
# `syscall_0x...(`, which no filter names, so they are reported as such.
SYSCALL = re.compile(r"^(\d+)\s+(?:<\.\.\. )?([a-z_][a-z0-9_]*)[( ]")
# Open flags that make an open a write.
WRITE_FLAGS = re.compile(r"\bO_(WRONLY|RDWR|CREAT|TRUNC|APPEND)\b")
# `dirfd<path>` as `strace -y` prints it (AT_FDCWD</cwd>, 5</var/lib/x>).
FD_PATH = r"(?:AT_FDCWD|\d+)<([^>]*)>"
QUOTED = r'"((?:[^"\\]|\\.)*)"'
AT_FDCWD = re.compile(r"AT_FDCWD<([^>]*)>")
# Calls that change the file system, with where their path arguments are:
# (regex over the argument text, which groups are (dirfd path, name) pairs).
PATH_CALLS: dict[str, list[re.Pattern[str]]] = {}
for _name in ("openat", "mkdirat", "unlinkat", "fchmodat", "fchownat", "utimensat", "mknodat"):
    PATH_CALLS[_name] = [re.compile(rf"^{FD_PATH}, {QUOTED}")]
for _name in ("open", "creat", "mkdir", "rmdir", "unlink", "chmod", "chown", "lchown", "truncate", "mknod"):
    PATH_CALLS[_name] = [re.compile(rf"^(){QUOTED}")]
for _name in ("renameat", "renameat2", "linkat"):
    PATH_CALLS[_name] = [re.compile(rf"^{FD_PATH}, {QUOTED}, {FD_PATH}, {QUOTED}")]
for _name in ("rename", "link"):
    PATH_CALLS[_name] = [re.compile(rf"^(){QUOTED}, (){QUOTED}")]
PATH_CALLS["symlinkat"] = [re.compile(rf'^"(?:[^"\\]|\\.)*", {FD_PATH}, {QUOTED}')]
PATH_CALLS["symlink"] = [re.compile(rf'^"(?:[^"\\]|\\.)*", (){QUOTED}')]
# Calls on an open file: the path is the descriptor's (`3</etc/x>`), and the
# `*at` calls with a NULL or empty name (AT_EMPTY_PATH) act on dirfd itself.
for _name in ("fchmod", "fchown", "ftruncate", "fsetxattr", "fremovexattr"):
    PATH_CALLS[_name] = [re.compile(rf"^\d+<([^>]*)>()")]
for _name in ("fchownat", "utimensat", "fchmodat"):
    PATH_CALLS[_name].append(re.compile(rf'^{FD_PATH}, (?:NULL|"")()'))
# A whole strace line: pid, name, arguments, result.
LINE = re.compile(r"^(\d+)\s+([a-z_][a-z0-9_]*)\((.*)\)\s+=\s+(.*)$")


@dataclass
class Recording:
    syscalls: dict[str, int] = field(default_factory=dict)
    # (path, call, result) of every call that wrote or tried to write a path.
    writes: list[tuple[str, str, str]] = field(default_factory=list)
    foreign_abi: list[str] = field(default_factory=list)
    lines: int = 0
    # strace -y was used (AT_FDCWD</dir> seen): relative paths can be resolved.
    paths_decoded: bool = False
    # (call, arguments) of the calls other sandbox settings restrict.
    restricted: list[tuple[str, str]] = field(default_factory=list)


# Calls that RestrictAddressFamilies=, MemoryDenyWriteExecute= and
# RestrictNamespaces= look at.
RESTRICTED = {"socket", "socketpair", "mmap", "mprotect", "pkey_mprotect", "unshare", "setns", "clone", "clone3"}


def resolve(base: str, name: str) -> str:
    if name.startswith("/"):
        return normalise(name)
    return normalise(f"{base}/{name}")


def normalise(path: str) -> str:
    parts: list[str] = []
    for p in path.split("/"):
        if p in ("", "."):
            continue
        if p == "..":
            if parts:
                parts.pop()
            continue
        parts.append(p)
    return "/" + "/".join(parts)


def written_paths(name: str, args: str, cwd: str = "/") -> list[str]:
    """The paths a file-system call writes, or [] if it does not write;
    `cwd` resolves the relative names of the calls without a dirfd."""
    if name in ("openat", "open") and not WRITE_FLAGS.search(args):
        return []
    out: list[str] = []
    for pattern in PATH_CALLS.get(name, []):
        m = pattern.match(args)
        if not m:
            continue
        g = m.groups()
        for i in range(0, len(g), 2):
            out.append(resolve(g[i] or cwd, g[i + 1]))
        break
    return out


def read_recording(path: Path) -> Recording:
    rec = Recording()
    # `<unfinished ...>` lines: the call's text continues in its `resumed` line.
    pending: dict[str, str] = {}
    # Each process's working directory: strace -y shows it as AT_FDCWD</dir>
    # on every *at call; chdir changes it and a child inherits it.
    cwd: dict[str, str] = {}
    with path.open(errors="replace") as fh:
        for raw in fh:
            line = raw.rstrip("\n")
            rec.lines += 1
            if "runs in 32 bit mode" in line or "runs in x32 mode" in line:
                rec.foreign_abi.append(line)
                continue
            m = SYSCALL.match(line)
            if not m:
                continue  # signals (--- SIG ---), exits, blank lines
            pid, name = m.groups()
            rec.syscalls[name] = rec.syscalls.get(name, 0) + 1
            if line.endswith("<unfinished ...>"):
                rec.syscalls[name] -= 1  # counted once, at its resumption
                pending[pid] = line[: -len("<unfinished ...>")].rstrip()
                continue
            if "resumed>" in line and pid in pending:
                line = pending.pop(pid) + line.split("resumed>", 1)[1]
            full = LINE.match(line)
            if not full:
                continue
            _, call, args, result = full.groups()
            for seen in AT_FDCWD.findall(args):
                cwd[pid] = seen
                rec.paths_decoded = True
            here = cwd.get(pid, "/")
            if result.startswith("0"):
                if call == "chdir" and (q := re.match(QUOTED, args)):
                    cwd[pid] = resolve(here, q.group(1))
                elif call == "fchdir" and (f := re.match(r"\d+<([^>]*)>", args)):
                    cwd[pid] = f.group(1)
            if call in ("clone", "clone3", "fork", "vfork") and (child := re.match(r"(\d+)", result)):
                cwd[child.group(1)] = here
            for p in written_paths(call, args, here):
                rec.writes.append((p, call, result))
            if call in RESTRICTED:
                rec.restricted.append((call, args))
    return rec


def other_settings(directives: dict[str, list[str]], rec: Recording) -> list[str]:
    """What the recording does that the unit's other seccomp-enforced
    settings forbid: a socket family outside RestrictAddressFamilies=, a
    writable and executable mapping or an mprotect to executable under
    MemoryDenyWriteExecute=yes (systemd refuses both), a new namespace under
    RestrictNamespaces=yes."""

    def last(key: str) -> str:
        values = directives.get(key, [])
        return values[-1] if values else ""

    families = " ".join(directives.get("RestrictAddressFamilies", [])).split()
    deny_families = bool(families) and families[0].startswith("~")
    families = [f.lstrip("~") for f in families]
    out: set[str] = set()
    for call, args in rec.restricted:
        if call in ("socket", "socketpair") and families:
            fam = args.split(",", 1)[0].strip()
            if (fam in families) == deny_families:
                out.add(f"{call}({fam}) outside RestrictAddressFamilies={' '.join(families)}")
        if last("MemoryDenyWriteExecute") == "yes":
            if call == "mmap" and "PROT_WRITE" in args and "PROT_EXEC" in args:
                out.add("mmap(PROT_WRITE|PROT_EXEC), refused under MemoryDenyWriteExecute=yes")
            if call in ("mprotect", "pkey_mprotect") and "PROT_EXEC" in args:
                out.add(f"{call}(PROT_EXEC), refused under MemoryDenyWriteExecute=yes")
        if last("RestrictNamespaces") == "yes" and call in ("unshare", "setns", "clone", "clone3"):
            if "CLONE_NEW" in args or call == "setns":
                out.add(f"{call} into a new namespace, refused under RestrictNamespaces=yes")
    return sorted(out)


def under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


# --- the check ---------------------------------------------------------------


def analyze_groups() -> dict[str, list[str]]:
    try:
        r = subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True, text=True, check=False)
    except FileNotFoundError as e:
        raise InputError("systemd-analyze is not installed (Debian: systemd)") from e
    if r.returncode != 0:
        raise InputError(f"systemd-analyze syscall-filter failed: {r.stderr.strip()}")
    return syscall_groups(r.stdout)


def unit_paths(spec: str) -> list[Path]:
    paths = [Path(p) for p in spec.split(",") if p]
    for p in paths:
        if not p.is_file():
            raise InputError(f"{p}: no such unit file")
    return paths


def check(args: argparse.Namespace) -> int:
    directives = unit_directives(unit_paths(args.unit))
    allow = allowed_syscalls(directives, analyze_groups())
    rec = read_recording(Path(args.log))
    if not rec.syscalls:
        raise InputError(f"{args.log}: no system calls recorded ({rec.lines} lines): not an strace -f log?")
    if args.writes and not rec.paths_decoded:
        raise InputError(f"{args.log}: descriptors carry no paths: record with strace -y (the write check needs them)")
    label = args.label or Path(args.unit.split(",")[0]).name
    problems: list[str] = []
    for line in rec.foreign_abi:
        problems.append(f"{label}: non-native ABI (SystemCallArchitectures=native kills it): {line}")
    outside = sorted(n for n in rec.syscalls if n not in allow)
    for n in outside:
        problems.append(
            f"{label}: system call {n} (called {rec.syscalls[n]} times) is outside the unit's SystemCallFilter"
        )
    for what in other_settings(directives, rec):
        problems.append(f"{label}: {what}")
    summary = f"{len(rec.syscalls)} distinct syscalls recorded, all allowed by SystemCallFilter"
    if args.writes:
        roots = writable_paths(directives)
        seen: set[str] = set()
        for path, call, result in rec.writes:
            if under(path, roots) or path in seen:
                continue
            seen.add(path)
            problems.append(
                f"{label}: writes {path} ({call} = {result}), outside what ProtectSystem=strict leaves "
                f"writable ({', '.join(roots)})"
            )
        own = [r for r in roots if r.startswith(("/var/lib/", "/run/", "/var/cache/", "/var/log/", "/etc/"))]
        used = sorted({r for r in own if any(under(p, [r]) for p, _, _ in rec.writes)})
        summary += f"; writes only under {','.join(used) if used else '(nothing)'}"
        other = sorted({p for p, _, _ in rec.writes if not under(p, own) and under(p, roots)})
        if other:
            summary += f" and {','.join(other)}"
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        return 1
    print(f"{label}: {summary}")
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="check a recording against a unit")
    c.add_argument("unit", help="the unit file, then its drop-ins, comma-separated")
    c.add_argument("log", help="strace -f -qq -y -o output")
    c.add_argument("--writes", action="store_true", help="also check written paths (ProtectSystem=strict)")
    c.add_argument("--label", help="name for the output lines (default: the unit's file name)")
    a = sub.add_parser("allowed", help="print the unit's expanded filter, one call a line")
    a.add_argument("unit")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "allowed":
            for n in sorted(allowed_syscalls(unit_directives(unit_paths(args.unit)), analyze_groups())):
                print(n)
            return 0
        return check(args)
    except (InputError, OSError) as e:
        print(f"sandbox_check: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
