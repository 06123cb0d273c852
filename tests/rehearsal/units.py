"""The rehearsal's stand-in for systemd as PID 1 inside one VM: it reads the
unit files cloud-init wrote to /etc/systemd/system and those the packages
installed in /usr/lib/systemd/system (with drop-ins and templates, /etc
first, as systemd's search path), and starts them as systemd would for what
the deployment uses:

- jobs pull in Requires=/Wants= and order by After=; a failed requirement
  fails the dependent's job; ConditionPathExists= and ExecCondition= skip;
- Type=oneshot (ExecStart to completion, ExecStartPost, RemainAfterExit=) and
  Type=simple;
- User=/Group= (setgid, setuid, no supplementary groups), EnvironmentFile=,
  UMask=, LimitNOFILE=, StateDirectory=/RuntimeDirectory= with their modes and
  STATE_DIRECTORY/RUNTIME_DIRECTORY (the runtime directory removed when the
  unit stops), systemd's PATH and the user's HOME/USER/LOGNAME/SHELL;
- Restart=on-failure with RestartSec= (a non-zero exit or a kill by any
  signal but SIGHUP/SIGINT/SIGTERM/SIGPIPE);
- timers: OnBootSec= (from the runner's start), OnUnitActiveSec=,
  RandomizedDelaySec=.

The sandbox directives (ProtectSystem=, SystemCallFilter=, ...) are not
applied here: the sandbox stage checks them against what the programs did.
Every directive the runner does not implement is listed in its state file,
so nothing is silently dropped.

Traced units (`--trace UNIT=LOG`, the sandbox stage's recordings): the
unit's ExecCondition= and ExecStart= run under `strace -f -qq -y -s 0 -A -o LOG`,
started after the switch to the unit's user (as setpriv would), so the log
begins at the program's own execve and holds everything it and its children
called; restarts append. The unit's main PID is the traced program, not
strace: signals (kill, KillMode=mixed's SIGTERM) go to it, as systemd's
would, and strace ends with its status.

Requests come as files in /run/rehearsal/systemctl.d (written by the
systemctl shim installed in the VM, or by the rehearsal); the state (per unit:
state, main PID, starts, restarts, exit statuses) is written to
/run/rehearsal/state.json; each unit's output goes to
/run/rehearsal/journal/UNIT.log.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import random
import re
import resource
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# systemd's search path for system units, highest precedence first.
UNIT_DIRS = [Path("/etc/systemd/system"), Path("/run/systemd/system"), Path("/usr/lib/systemd/system")]
CTL = Path("/run/rehearsal")
REQUESTS = CTL / "systemctl.d"
JOURNAL = CTL / "journal"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CLEAN_SIGNALS = {signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE}
IMPLEMENTED = {
    "Unit": {"Description", "Requires", "Wants", "After", "ConditionPathExists", "StartLimitIntervalSec",
             "StartLimitBurst"},
    "Service": {"Type", "User", "Group", "EnvironmentFile", "ExecStart", "ExecStartPost", "ExecCondition",
                "RemainAfterExit", "Restart", "RestartSec", "TimeoutStartSec", "TimeoutStopSec", "KillMode",
                "LimitNOFILE", "RuntimeDirectory", "RuntimeDirectoryMode", "StateDirectory",
                "StateDirectoryMode", "UMask"},
    "Timer": {"OnBootSec", "OnUnitActiveSec", "RandomizedDelaySec"},
    "Install": {"WantedBy"},
}
# Always-on services of a booted machine that units name (network-online.target):
# reached once the runner runs (the VM's network is up before it starts).
REACHED_TARGETS = {"network-online.target", "network.target", "multi-user.target", "timers.target"}


def seconds(text: str) -> float:
    """systemd time spans used by the deployment: "30s", "2s", "1min", "infinity", "120"."""
    text = text.strip()
    if text == "infinity":
        return float("inf")
    total = 0.0
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)\s*(ms|s|sec|min|m|h)?", text):
        total += float(num) * {"ms": 0.001, "": 1, "s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600}[unit]
    return total


def parse_unit(text: str, into: dict) -> dict:
    """INI with repeated keys kept in order; an empty assignment resets a list."""
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = into.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if section is None:
            raise ValueError(f"assignment outside a section: {raw!r}")
        if value == "":
            section[key] = []
        else:
            section.setdefault(key, []).append(value)
    return into


def env_file(path: str) -> dict:
    env = {}
    for raw in Path(path).read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key.strip()] = value
    return env


class Spawned:
    @staticmethod
    def popen(argv, **kw) -> subprocess.Popen:
        """Popen, or a process that failed at once (as systemd's "Failed to
        spawn"): exit status 203, the reason in the unit's journal."""
        try:
            return subprocess.Popen(argv, **kw)
        except (OSError, subprocess.SubprocessError) as e:
            kw["stdout"].write(f"failed to spawn {argv[0]}: {e}\n".encode())
            kw["stdout"].flush()
            return subprocess.Popen(["/bin/sh", "-c", "exit 203"])


@dataclass
class Unit:
    name: str
    conf: dict
    state: str = "inactive"  # inactive, activating, active, failed, skipped
    pid: int | None = None
    proc: subprocess.Popen | None = None
    starts: int = 0
    restarts: int = 0
    exits: list = field(default_factory=list)
    restart_at: float | None = None
    timer_next: float | None = None
    stopping: bool = False
    start_times: list = field(default_factory=list)
    # The traced program under strace (its main PID), when the unit is traced.
    main_pid: int | None = None

    def main(self) -> int | None:
        return self.main_pid or (self.proc.pid if self.proc else None)

    def get(self, section: str, key: str, default=None):
        values = self.conf.get(section, {}).get(key)
        return values[-1] if values else default

    def all(self, section: str, key: str) -> list[str]:
        out = []
        for v in self.conf.get(section, {}).get(key, []):
            out += v.split()
        return out

    def instance(self) -> str:
        m = re.match(r"[^@]+@([^.]*)\.", self.name)
        return m.group(1) if m else ""

    def spec(self, text: str) -> str:
        return text.replace("%i", self.instance()).replace("%n", self.name)


def load(name: str) -> Unit:
    """The unit file (or its template) found first on the search path, plus
    the drop-ins of every directory on it, as systemd merges them."""
    conf: dict = {}
    names = [name]
    if "@" in name:
        names.append(name.split("@")[0] + "@" + name[name.rindex("."):])
    path = next((d / n for n in names for d in UNIT_DIRS if (d / n).exists()), None)
    if path is None:
        raise FileNotFoundError(f"unit {name} not found in {', '.join(map(str, UNIT_DIRS))}")
    parse_unit(path.read_text(), conf)
    dropins: dict[str, Path] = {}
    for d in reversed(UNIT_DIRS):  # a drop-in of the same name in /etc wins
        if (d / f"{name}.d").is_dir():
            dropins.update({f.name: f for f in (d / f"{name}.d").glob("*.conf")})
    for fname in sorted(dropins):
        parse_unit(dropins[fname].read_text(), conf)
    return Unit(name, conf)


# -s 0: no buffer contents (file names are always printed whole): the relay's
# recvmsg/sendmsg of a 160 MiB upload would otherwise fill the VM's /run.
STRACE = ["/usr/bin/strace", "-f", "-qq", "-y", "-s", "0", "-A", "-o"]


def tracee(tracer: int, limit_s: float = 10) -> int | None:
    """strace's child that has executed the program (strace also forks
    short-lived children of its own to probe the kernel at start)."""
    deadline = time.monotonic() + limit_s
    try:
        own = os.readlink(f"/proc/{tracer}/exe")
    except OSError:
        return None
    while time.monotonic() < deadline:
        try:
            kids = Path(f"/proc/{tracer}/task/{tracer}/children").read_text().split()
        except OSError:
            return None  # strace is gone
        for kid in kids:
            try:
                if os.readlink(f"/proc/{kid}/exe") != own:
                    return int(kid)
            except OSError:
                continue
        time.sleep(0.01)
    return None


class Runner:
    def __init__(self, trace: dict[str, str] | None = None):
        self.trace = trace or {}
        self.units: dict[str, Unit] = {}
        self.enabled: set[str] = set()
        self.boot = time.monotonic()
        self.log = open(JOURNAL / "runner.log", "a", buffering=1)

    def unit(self, name: str) -> Unit:
        if name not in self.units:
            self.units[name] = load(name)
        return self.units[name]

    def say(self, msg: str) -> None:
        self.log.write(f"{time.strftime('%H:%M:%S')} {msg}\n")

    # --- jobs -------------------------------------------------------------
    def start(self, name: str) -> bool:
        """Starts a unit and its requirements in order (synchronously for
        oneshots, as a start job would complete). True if it is active."""
        if name in REACHED_TARGETS:
            return True
        u = self.unit(name)
        if name.endswith(".timer"):
            if u.state != "active":
                u.state = "active"
                boot = seconds(u.get("Timer", "OnBootSec", "0"))
                u.timer_next = max(time.monotonic(), self.boot + boot) + self.jitter(u)
                self.say(f"{name}: started, next elapse in {u.timer_next - time.monotonic():.1f} s")
            return True
        if u.state in ("active", "activating"):
            return True
        for dep in u.all("Unit", "Requires"):
            if not self.start(dep):
                u.state = "failed"
                u.exits.append(f"dependency {dep} failed")
                self.say(f"{name}: dependency failed ({dep})")
                return False
        for dep in u.all("Unit", "Wants"):
            self.start(dep)
        for path in u.all("Unit", "ConditionPathExists"):
            negate = path.startswith("!")
            if os.path.exists(path.lstrip("!")) == negate:
                u.state = "skipped"
                self.say(f"{name}: condition ConditionPathExists={path} not met, skipped")
                return True
        return self.execute(u)

    def jitter(self, u: Unit) -> float:
        return random.uniform(0, seconds(u.get("Timer", "RandomizedDelaySec", "0")))

    def execute(self, u: Unit) -> bool:
        cond = u.get("Service", "ExecCondition")
        if cond is not None:
            rc = self.spawn(u, cond, traced=True).wait()
            if rc != 0:
                u.state = "skipped" if 1 <= rc <= 254 else "failed"
                self.say(f"{u.name}: ExecCondition exited {rc}: {u.state}")
                return u.state == "skipped"
        # systemd's start rate limit (DefaultStartLimitIntervalSec=10s,
        # DefaultStartLimitBurst=5 unless the unit says otherwise; 0 = none).
        interval = seconds(u.get("Unit", "StartLimitIntervalSec", "10s"))
        burst = int(u.get("Unit", "StartLimitBurst", "5"))
        now = time.monotonic()
        u.start_times = [t for t in u.start_times if now - t < interval]
        if interval and len(u.start_times) >= burst:
            u.state = "failed"
            u.exits.append("start-limit-hit")
            self.say(f"{u.name}: start request repeated too quickly (start-limit-hit)")
            self.write_state()
            return False
        u.start_times.append(now)
        self.prepare_dirs(u)
        u.starts += 1
        kind = u.get("Service", "Type", "simple")
        proc = self.spawn(u, u.get("Service", "ExecStart"), traced=True)
        u.proc, u.pid = proc, proc.pid
        u.main_pid = tracee(proc.pid) if u.name in self.trace else None
        self.say(f"{u.name}: started ({kind}) pid {u.main()}"
                 + (f" under strace (pid {proc.pid}) -> {self.trace[u.name]}" if u.name in self.trace else ""))
        if kind == "oneshot":
            u.state = "activating"
            self.write_state()
            rc = proc.wait()
            u.exits.append(rc)
            u.proc, u.main_pid = None, None
            if rc != 0:
                return self.failed(u, rc)
            self.say(f"{u.name}: ExecStart exited 0")
            u.state = "active" if u.get("Service", "RemainAfterExit", "no") == "yes" else "inactive"
        else:
            u.state = "active"
        for post in u.conf.get("Service", {}).get("ExecStartPost", []):
            rc = self.spawn(u, post).wait()
            if rc != 0:
                return self.failed(u, rc)
        self.write_state()
        return True

    def failed(self, u: Unit, rc) -> bool:
        u.state = "failed"
        self.say(f"{u.name}: failed ({rc})")
        self.cleanup_dirs(u)
        if u.get("Service", "Restart", "no") in ("on-failure", "always") and not u.stopping:
            u.restart_at = time.monotonic() + seconds(u.get("Service", "RestartSec", "100ms"))
        self.write_state()
        return False

    def stop(self, name: str, limit_s: float = 90) -> None:
        """KillMode=mixed: SIGTERM to the main process; otherwise (control-group)
        to every process of the unit. After TimeoutStopSec, SIGKILL to all."""
        u = self.unit(name)
        u.stopping = True
        if u.proc is not None and u.proc.poll() is None:
            if u.get("Service", "KillMode", "control-group") == "mixed":
                try:
                    os.kill(u.main(), signal.SIGTERM)
                except ProcessLookupError:
                    pass
            else:
                self.killpg(u.proc.pid, signal.SIGTERM)
            try:
                u.proc.wait(timeout=min(seconds(u.get("Service", "TimeoutStopSec", "90s")), limit_s))
            except subprocess.TimeoutExpired:
                self.killpg(u.proc.pid, signal.SIGKILL)
                u.proc.wait()
            self.killpg(u.proc.pid, signal.SIGKILL)
        u.state, u.proc, u.main_pid, u.restart_at, u.timer_next = "inactive", None, None, None, None
        self.cleanup_dirs(u)
        u.stopping = False

    @staticmethod
    def killpg(pgid: int, sig: int) -> None:
        # Each unit's processes are one process group (the runner's stand-in
        # for its cgroup): the main process called setsid.
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass

    # --- process ----------------------------------------------------------
    def prepare_dirs(self, u: Unit) -> None:
        user, group = self.ids(u)
        for key, base in (("StateDirectory", "/var/lib"), ("RuntimeDirectory", "/run")):
            for d in u.all("Service", key):
                path = Path(base) / d
                path.mkdir(parents=True, exist_ok=True)
                os.chown(path, user, group)
                os.chmod(path, int(u.get("Service", key + "Mode", "0755"), 8))

    def cleanup_dirs(self, u: Unit) -> None:
        for d in u.all("Service", "RuntimeDirectory"):
            subprocess.run(["rm", "-rf", str(Path("/run") / d)], check=False)

    def ids(self, u: Unit) -> tuple[int, int]:
        user = u.get("Service", "User")
        if user is None:
            return 0, 0
        pw = pwd.getpwnam(user)
        group = u.get("Service", "Group")
        return pw.pw_uid, grp.getgrnam(group).gr_gid if group else pw.pw_gid

    def environment(self, u: Unit) -> dict:
        env = {"PATH": PATH, "LANG": "C.UTF-8", "INVOCATION_ID": os.urandom(16).hex()}
        user = u.get("Service", "User")
        pw = pwd.getpwnam(user or "root")
        env.update(HOME=pw.pw_dir, USER=pw.pw_name, LOGNAME=pw.pw_name, SHELL=pw.pw_shell)
        if dirs := u.all("Service", "StateDirectory"):
            env["STATE_DIRECTORY"] = ":".join(f"/var/lib/{d}" for d in dirs)
        if dirs := u.all("Service", "RuntimeDirectory"):
            env["RUNTIME_DIRECTORY"] = ":".join(f"/run/{d}" for d in dirs)
        for f in u.conf.get("Service", {}).get("EnvironmentFile", []):
            optional = f.startswith("-")
            if optional and not os.path.exists(f[1:]):
                continue
            env.update(env_file(f.lstrip("-")))
        return env

    def spawn(self, u: Unit, cmdline: str, traced: bool = False) -> subprocess.Popen:
        argv = shlex.split(u.spec(cmdline))
        flags = ""
        while argv and argv[0][:1] in "-@:+!":
            flags += argv[0][0]
            argv[0] = argv[0][1:]
        uid, gid = self.ids(u)
        if traced and u.name in self.trace:
            log = Path(self.trace[u.name])
            # strace runs as the unit's user (after the switch below): the
            # log is made for it first, and appended to across restarts.
            log.parent.mkdir(parents=True, exist_ok=True)
            log.touch(mode=0o600, exist_ok=True)
            os.chown(log, uid, gid)
            argv = [*STRACE, str(log), *argv]
        umask = int(u.get("Service", "UMask", "0022"), 8)
        nofile = u.get("Service", "LimitNOFILE")

        if nofile:
            n = int(nofile)
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            if hard != resource.RLIM_INFINITY and n > hard:
                # systemd (PID 1) may raise the hard limit; this runner may not
                # (no CAP_SYS_RESOURCE where the rehearsal runs): say so.
                self.say(f"{u.name}: LimitNOFILE={n} capped to the hard limit {hard} here")
                n = hard

        def child():
            os.setsid()
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
            os.umask(umask)
            if uid or gid:
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)

        out = open(JOURNAL / f"{u.name}.log", "ab")
        return Spawned.popen(argv, env=self.environment(u), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, preexec_fn=child, cwd="/")

    # --- loop -------------------------------------------------------------
    def reap(self) -> None:
        for u in self.units.values():
            if u.proc is None or u.get("Service", "Type", "simple") == "oneshot":
                continue
            rc = u.proc.poll()
            if rc is None:
                continue
            u.exits.append(rc)
            u.proc, u.main_pid = None, None
            if u.stopping:
                continue
            clean = rc == 0 or (rc < 0 and signal.Signals(-rc) in CLEAN_SIGNALS)
            if clean:
                u.state = "inactive"
                self.cleanup_dirs(u)
                self.say(f"{u.name}: exited {rc}")
            else:
                self.failed(u, rc)

    def tick(self) -> None:
        now = time.monotonic()
        for u in list(self.units.values()):
            if u.restart_at is not None and now >= u.restart_at:
                u.restart_at = None
                u.restarts += 1
                u.state = "inactive"
                self.say(f"{u.name}: scheduled restart {u.restarts}")
                self.start(u.name)
            if u.timer_next is not None and now >= u.timer_next:
                service = u.name[: -len(".timer")] + ".service"
                svc = self.unit(service)
                if svc.state not in ("activating",):
                    svc.state = "inactive"
                    self.say(f"{u.name}: elapsed, starting {service}")
                    self.start(service)
                period = seconds(u.get("Timer", "OnUnitActiveSec", "0"))
                u.timer_next = time.monotonic() + period + self.jitter(u) if period else None
        self.write_state()

    def request(self, words: list[str]) -> None:
        self.say("systemctl " + " ".join(words))
        now = "--now" in words
        words = [w for w in words if w not in ("--no-block", "--now", "-q", "--quiet")]
        if not words:
            return
        verb, names = words[0], words[1:]
        if verb == "daemon-reload":
            for name in list(self.units):
                old = self.units[name]
                new = load(name)
                old.conf = new.conf
        elif verb == "enable":
            self.enabled.update(names)
            if now:
                for n in names:
                    self.start(n)
        elif verb == "start":
            for n in names:
                self.start(n)
        elif verb == "stop":
            for n in names:
                self.stop(n)
        elif verb == "restart":
            for n in names:
                self.stop(n)
                self.start(n)
        else:
            self.say(f"systemctl {verb}: not handled by the rehearsal's runner")

    def write_state(self) -> None:
        state = {
            "enabled": sorted(self.enabled),
            "units": {n: {"state": u.state, "pid": u.main() if u.proc else None, "starts": u.starts,
                          "traced": self.trace.get(n),
                          "restarts": u.restarts, "exits": [str(e) for e in u.exits],
                          "not_applied": sorted({f"{s}/{k}" for s, kv in u.conf.items() for k in kv
                                                 if k not in IMPLEMENTED.get(s, set())})}
                      for n, u in self.units.items()},
        }
        tmp = CTL / "state.json.new"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.rename(CTL / "state.json")

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.shutdown())
        while True:
            for f in sorted(REQUESTS.glob("*.req")):
                words = f.read_text().split()
                f.unlink()
                try:
                    self.request(words)
                except FileNotFoundError as e:  # systemctl's "Unit ... not found."
                    self.say(f"systemctl {' '.join(words)}: {e}")
            self.reap()
            self.tick()
            time.sleep(0.1)

    def shutdown(self) -> None:
        for name in list(self.units):
            self.stop(name, limit_s=5)
        self.write_state()
        sys.exit(0)


def main() -> int:
    trace = {}
    args = sys.argv[1:]
    while args:
        if args[0] != "--trace" or len(args) < 2 or "=" not in args[1]:
            print(f"units.py: usage: units.py [--trace UNIT=LOG]... (got {args[0]!r})", file=sys.stderr)
            return 2
        unit, _, log = args[1].partition("=")
        trace[unit] = log
        args = args[2:]
    # /run/systemd/system: what systemd makes at boot, and what maintainer
    # scripts test to see that it runs (the packages' postinst then reloads).
    for d in (CTL, REQUESTS, JOURNAL, Path("/run/systemd/system")):
        d.mkdir(parents=True, exist_ok=True)
    Runner(trace).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
