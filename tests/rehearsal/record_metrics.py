#!/usr/bin/env python3
"""Records a real relay's /metrics through scenarios, as promtool input series
for the alert rules' unit tests (deploy/monitoring/relay-alerts.test.yml).

    record_metrics.py record [SCENARIO...] [--bin-dir DIR] [--interval 15]
    record_metrics.py embed [--check]

`record` starts, per scenario, an in-memory Azurite (--loose: it accepts the
deployed crc64 block checksums) and a relay-server process with the account
key on loopback, scrapes GET /metrics every INTERVAL seconds the way
Prometheus does (adding `job` and `instance`, and `up`: 1 when the scrape
answered, 0 when not; a series that vanishes gets a stale marker), drives
the scenario with the real relay-client, and writes
deploy/monitoring/testdata/SCENARIO.yml: the input_series, sample k taken at
k * INTERVAL, with the scenario's events as comments. Scenarios (all at once
by default; they run in parallel, about 6 minutes in all):

  normal           uploads through the relay; nothing should fire
  relay-down       uploads, then the relay is killed (SIGKILL)
  storage-stopped  an upload in flight, then Azurite is killed
  refused          a burst of Offers with a token the relay does not know
  storage-slow     a small budget (64 MiB), four clients with two tokens (one
                   token may hold half the budget), and a proxy in front of
                   Azurite that holds every Put Block and Put Block List
                   12 s: commits take over 10 s
  budget-full      as storage-slow with eight clients, only Put Block held:
                   the budget stays full, blocks wait for it

`embed` copies each testdata file into relay-alerts.test.yml between its
`# recorded: testdata/NAME.yml` and `# end recorded` lines; `--check` only
compares and fails on a difference (tests/rehearsal/alerts.sh runs it), so
the tests run on exactly the committed recordings.

Standard library only. Needs the debug (or --bin-dir) relay-server and
relay-client and the repository's Azurite (npm ci).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
TESTDATA = MONITORING / "testdata"
TEST_FILE = MONITORING / "relay-alerts.test.yml"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
JOB = "blob-relay"
INSTANCE = "relay-1:9090"
# A sample line of the OpenMetrics page: name, optional {labels}, value.
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_page(text: str, instance: str = INSTANCE) -> dict[str, float]:
    """Samples of one scrape, keyed by their series name with sorted labels
    (job and instance added, as Prometheus' target labels)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise ValueError(f"unparsable /metrics line: {line!r}")
        name, labels, value = m.groups()
        if name.endswith("_created"):
            continue  # OpenMetrics creation times; Prometheus does not store them by default
        pairs = dict(LABEL.findall(labels or ""))
        pairs.update(job=JOB, instance=instance)
        out[series_name(name, pairs)] = float(value)
    return out


def series_name(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


class Scraper(threading.Thread):
    """GET /metrics every `interval` s on a fixed schedule; None for a failed
    scrape (connection refused, timeout)."""

    def __init__(self, url: str, interval: float):
        super().__init__(daemon=True)
        self.url, self.interval = url, interval
        self.samples: list[dict[str, float] | None] = []
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        k = 0
        while not self.stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=min(10.0, self.interval)) as r:
                    self.samples.append(parse_page(r.read().decode()))
            except OSError:
                self.samples.append(None)
            k += 1
            self.stop.wait(max(0.0, self.t0 + k * self.interval - time.monotonic()))

    def step(self) -> int:
        """The index of the next sample (for event notes)."""
        return len(self.samples)


class DelayProxy(threading.Thread):
    """TCP proxy to Azurite that holds each request whose first bytes match
    `held` (e.g. `comp=block`: Put Block and Put Block List) for `delay` s
    before forwarding it: Azure slow to accept blocks or to commit."""

    def __init__(self, upstream: int, delay: float, held: bytes):
        super().__init__(daemon=True)
        self.upstream, self.delay, self.held = upstream, delay, re.compile(held)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]

    def run(self) -> None:
        while True:
            client, _ = self.sock.accept()
            server = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self.pipe, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self.pipe, args=(server, client, False), daemon=True).start()

    def pipe(self, src: socket.socket, dst: socket.socket, requests: bool) -> None:
        try:
            while data := src.recv(65536):
                # A request line starts a chunk; a body chunk naming it by chance only waits.
                if requests and data[:3].isalpha() and self.held.search(data[:4096]):
                    time.sleep(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class Lab:
    """Azurite, optionally the delaying proxy, and one relay-server process."""

    def __init__(self, name: str, bin_dir: Path, interval: float, budget: str = "1GiB", delay: float = 0,
                 held: bytes = rb"comp=block"):
        self.name, self.bin_dir = name, bin_dir
        self.work = Path(tempfile.mkdtemp(prefix=f"record-{name}."))
        self.events: list[tuple[int, str]] = []
        self.procs: list[subprocess.Popen] = []
        az_port = free_port()
        self.azurite = self.spawn(
            [str(REPO / "node_modules/.bin/azurite-blob"), "--blobHost", "127.0.0.1", "--blobPort", str(az_port),
             "--inMemoryPersistence", "--disableTelemetry", "--skipApiVersionCheck", "--silent", "--loose"],
            "azurite.log")
        wait_for(lambda: connects(az_port), f"{name}: Azurite")
        self.direct_url = f"http://127.0.0.1:{az_port}/devstoreaccount1"
        storage_port = az_port
        if delay:
            proxy = DelayProxy(az_port, delay, held)
            proxy.start()
            storage_port = proxy.port
        self.token = "record-" + secrets.token_hex(12)
        # A second client identity: one token may hold only RELAY_TOKEN_SHARE
        # (50 %) of the budget.
        self.token2 = "record-" + secrets.token_hex(12)
        (self.work / "tokens").write_text(f"{self.token} rec\n{self.token2} rec\n")
        self.data = self.work / "data"
        self.data.mkdir()
        # The container, with the account key straight to Azurite.
        self.client(["upload", "--direct", "--create-container", "--storage-url", self.direct_url,
                     "--account-key", DEV_KEY, "--block-checksum", "crc64", "--to", "rec/setup",
                     str(self.file("setup.bin", 1000))], check=True)
        self.relay_addr = f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}"
        health = f"127.0.0.1:{free_port()}"
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "RELAY_LISTEN": self.relay_addr,
            "RELAY_STORAGE_URL": f"http://127.0.0.1:{storage_port}/devstoreaccount1",
            "RELAY_ACCOUNT_KEY": DEV_KEY,
            "RELAY_TOKENS": str(self.work / "tokens"),
            "RELAY_STATE_DIR": str(self.work / "state"),
            "RELAY_CERT_FINGERPRINT_FILE": str(self.work / "cert-sha256"),
            "RELAY_HEALTH_LISTEN": health,
            "RELAY_MEMORY_BUDGET": budget,
            # As deployed (cloud-init's relay.env); the storage check keeps its 30 s default.
            "RELAY_BLOCK_CHECKSUM": "crc64",
        }
        self.relay = self.spawn([str(bin_dir / "relay-server")], "relay.log", env=env)
        wait_for(lambda: (self.work / "cert-sha256").is_file() and http_ok(f"http://{health}/healthz"),
                 f"{name}: relay", self.relay)
        self.fingerprint = (self.work / "cert-sha256").read_text().strip()
        self.scraper = Scraper(f"http://{health}/metrics", interval)
        self.scraper.start()
        self.uploads = 0

    def spawn(self, argv: list[str], log: str, env: dict | None = None) -> subprocess.Popen:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=(self.work / log).open("w"), env=env)
        self.procs.append(p)
        return p

    def file(self, name: str, size: int) -> Path:
        path = self.data / name
        path.write_bytes(os.urandom(size))
        return path

    def client(self, args: list[str], check: bool = False, token: str | None = None) -> int:
        env = dict(os.environ, RELAY_TOKEN=token or self.token)
        with (self.work / "client.log").open("a") as log:
            rc = subprocess.run([str(self.bin_dir / "relay-client"), *args], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, env=env, check=False).returncode
        if check and rc != 0:
            raise SystemExit(f"{self.name}: relay-client {args[:2]} failed; see {self.work}/client.log")
        return rc

    def upload(self, size: int, token: str | None = None) -> int:
        """One file through the relay; relay-client's exit status."""
        self.uploads += 1
        path = self.file(f"u{self.uploads}.bin", size)
        rc = self.client(["upload", str(path), "--relay", self.relay_addr, "--relay-cert-sha256",
                          self.fingerprint, "--to", f"rec/{self.uploads}"], token=token)
        path.unlink()
        return rc

    def note(self, what: str) -> None:
        self.events.append((self.scraper.step(), what))
        print(f"  {self.name}: sample {self.scraper.step()}: {what}", flush=True)

    def until_sample(self, k: int, action=None) -> None:
        """Repeats `action` (or waits) until sample k has been taken."""
        while self.scraper.step() <= k:
            if action:
                action()
            else:
                time.sleep(0.2)

    def finish(self) -> list[dict[str, float] | None]:
        self.scraper.stop.set()
        self.scraper.join()
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        shutil.rmtree(self.work, ignore_errors=True)
        return self.scraper.samples


def connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def wait_for(ok, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + 60
    while not ok():
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{what} exited ({proc.returncode})")
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start")
        time.sleep(0.1)


MIB = 1 << 20


def normal(lab: Lab) -> None:
    lab.note("uploads begin: 24 MiB and 100 KiB files, one after another")
    sizes = iter([24 * MIB, 100_000] * 1000)
    lab.until_sample(10, lambda: lab.upload(next(sizes)) == 0 or lab.note("an upload failed"))
    lab.note("uploads end")
    lab.until_sample(13)


def relay_down(lab: Lab) -> None:
    lab.note("uploads begin")
    lab.until_sample(4, lambda: lab.upload(4 * MIB))
    lab.relay.kill()
    lab.relay.wait()
    lab.note("relay killed (SIGKILL)")
    lab.until_sample(14)


def storage_stopped(lab: Lab) -> None:
    lab.note("uploads begin")
    lab.until_sample(3, lambda: lab.upload(4 * MIB))
    big = lab.file("big.bin", 64 * MIB)
    t = threading.Thread(target=lambda: lab.client(
        ["upload", str(big), "--relay", lab.relay_addr, "--relay-cert-sha256", lab.fingerprint,
         "--to", "rec/big"]), daemon=True)
    t.start()
    time.sleep(1.0)
    lab.azurite.kill()
    lab.azurite.wait()
    lab.note("Azurite killed while a 64 MiB upload is in flight")
    lab.until_sample(20)
    lab.note(f"the 64 MiB upload {'ended' if not t.is_alive() else 'is still retrying'}")


def refused(lab: Lab) -> None:
    lab.note("uploads with the right token")
    lab.until_sample(3, lambda: lab.upload(100_000))
    bad = "not-a-known-token-" + secrets.token_hex(8)
    lab.note("burst: uploads with a token the relay does not know, one after another")
    lab.until_sample(7, lambda: lab.upload(1000, token=bad))
    lab.note("burst ends; uploads with the right token")
    lab.until_sample(14, lambda: lab.upload(100_000))


def storage_slow(lab: Lab) -> None:
    lab.note("uploads begin: four clients (two tokens) of 48 MiB files through Azure held 12 s per block and commit")
    stop = threading.Event()

    def loop(token: str) -> None:
        while not stop.is_set():
            lab.upload(48 * MIB, token=token)

    workers = [threading.Thread(target=loop, args=(t,), daemon=True) for t in [lab.token, lab.token2] * 2]
    for w in workers:
        w.start()
    lab.until_sample(22)
    stop.set()
    lab.note("clients stop starting uploads")
    lab.until_sample(24)


def budget_full(lab: Lab) -> None:
    lab.note("uploads begin: eight clients (two tokens) of 48 MiB files; Azure holds every Put Block 12 s")
    stop = threading.Event()

    def loop(token: str) -> None:
        while not stop.is_set():
            lab.upload(48 * MIB, token=token)

    workers = [threading.Thread(target=loop, args=(t,), daemon=True) for t in [lab.token, lab.token2] * 4]
    for w in workers:
        w.start()
    lab.until_sample(22)
    stop.set()
    lab.note("clients stop starting uploads")
    lab.until_sample(24)


SCENARIOS = {
    "normal": (normal, {}),
    "relay-down": (relay_down, {}),
    "storage-stopped": (storage_stopped, {}),
    "refused": (refused, {}),
    "storage-slow": (storage_slow, {"budget": "64MiB", "delay": 12.0}),
    "budget-full": (budget_full, {"budget": "64MiB", "delay": 12.0, "held": rb"comp=block(?!list)"}),
}


def values_text(values: list[str]) -> str:
    """promtool's notation, runs of one value as `VxN` (N more of it), runs
    of missing samples as `_xN` (N of them: a missing sample has no value to
    repeat, so promtool counts `_xN` as N, not N + 1)."""
    out: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[i]:
            j += 1
        run = j - i
        if run >= 1 and values[i] == "_":
            out.append(f"_x{run + 1}")
        elif run >= 2 and values[i] != "stale":
            out.append(f"{values[i]}x{run}")
        else:
            out.extend(values[i : j + 1])
        i = j + 1
    return " ".join(out)


def fmt(v: float) -> str:
    return str(int(v)) if v == int(v) else repr(v)


def input_series(samples: list[dict[str, float] | None], instance: str = INSTANCE) -> list[tuple[str, str]]:
    names = sorted({n for s in samples if s for n in s})
    rows = [(series_name("up", {"job": JOB, "instance": instance}),
             values_text(["1" if s is not None else "0" for s in samples]))]
    for name in names:
        rows.append((name, promtool_values([s.get(name) if s is not None else None for s in samples])))
    return rows


def promtool_values(values: list[float | None]) -> str:
    """One series' samples (None: not in that scrape) in promtool's notation."""
    vals: list[str] = []
    present = False
    for v in values:
        if v is not None:
            vals.append(fmt(v))
            present = True
        else:
            # Prometheus marks a series stale when it vanishes from a scrape.
            vals.append("stale" if present else "_")
            present = False
    return values_text(vals)


def git_commit() -> str:
    r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def write_recording(name: str, lab: Lab, samples, interval: float) -> Path:
    out = TESTDATA / f"{name}.yml"
    lines = [
        f"# Recorded by `python3 tests/rehearsal/record_metrics.py record {name}` at commit {git_commit()},",
        f"# {datetime.date.today().isoformat()}: a real relay-server and Azurite on loopback (shared 2-core machine).",
        f"# Scrape interval {interval:g}s: sample k is at k*{interval:g}s. Events (sample: what):",
        *[f"#   {k}: {what}" for k, what in lab.events],
    ]
    for series, values in input_series(samples):
        lines.append(f"- series: '{series}'")
        lines.append(f"  values: '{values}'")
    out.write_text("\n".join(lines) + "\n")
    return out


def record(args: argparse.Namespace) -> int:
    TESTDATA.mkdir(parents=True, exist_ok=True)
    names = args.scenario or list(SCENARIOS)
    for n in names:
        if n not in SCENARIOS:
            raise SystemExit(f"unknown scenario {n} (one of {', '.join(SCENARIOS)})")
    failures: list[str] = []

    def one(name: str) -> None:
        run, opts = SCENARIOS[name]
        lab = Lab(name, args.bin_dir, args.interval, **opts)
        try:
            run(lab)
        except BaseException as e:  # recorded as a failure of this scenario, the others go on
            failures.append(f"{name}: {e}")
        finally:
            samples = lab.finish()
        if not any(f.startswith(name + ":") for f in failures):
            print(f"  {name}: {len(samples)} samples -> {write_recording(name, lab, samples, args.interval)}")

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for f in failures:
        print(f"record_metrics: {f}", file=sys.stderr)
    return 1 if failures else 0


BEGIN = re.compile(r"^(\s*)# recorded: testdata/([\w.-]+\.yml)\s*$")
END = re.compile(r"^\s*# end recorded\s*$")


def embedded(text: str) -> str:
    """The test file with each recorded block replaced by its testdata file."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = BEGIN.match(lines[i])
        out.append(lines[i])
        i += 1
        if not m:
            continue
        indent, name = m.groups()
        j = i
        while j < len(lines) and not END.match(lines[j]):
            j += 1
        if j == len(lines):
            raise SystemExit(f"{TEST_FILE.name}: no '# end recorded' after testdata/{name}")
        for line in (TESTDATA / name).read_text().splitlines():
            out.append(indent + line if line else line)
        out.append(lines[j])
        i = j + 1
    return "\n".join(out) + "\n"


def embed(args: argparse.Namespace) -> int:
    current = TEST_FILE.read_text()
    wanted = embedded(current)
    if args.check:
        if current != wanted:
            print(f"{TEST_FILE}: its recorded series differ from testdata/ (run record_metrics.py embed)",
                  file=sys.stderr)
            return 1
        return 0
    TEST_FILE.write_text(wanted)
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("scenario", nargs="*")
    default_bin = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "debug"
    r.add_argument("--bin-dir", type=Path, default=default_bin)
    r.add_argument("--interval", type=float, default=15.0)
    e = sub.add_parser("embed")
    e.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return record(args) if args.cmd == "record" else embed(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
