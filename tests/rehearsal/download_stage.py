"""The rehearsal's download stage (docs/REHEARSAL.md): `relay-client download`
from the bench VM through the balancer, the relays reading the uploads
account with their managed identity over HTTPS, a relay stopped in the
middle of a download that the rerun resumes on the other relay, and two
downloads of the same sources into one folder at once. A mixin of
`rehearse.Rehearsal` (its VMs, deployer, balancer and unit-runner state) that
uses the traffic stages' helpers (`client`, `flows_since`, `balancer_flows`).

What it reads: blobs another job wrote straight into a container listed in
`download_containers` (the deployer plays that job: a 64 MiB one and small
ones), and small files the bench VM uploaded through the balancer into the
upload container. The token is the one `tokens` in rehearsal.tfvars declares
with `:r` on that container, as Terraform writes it into the tokens blob.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import signal
import subprocess
import time
from pathlib import Path

import infra
from errors import StageFailed, check

RELAYS = ["relay-1", "relay-2"]
BIG = 64 << 20
# The first run is stopped once this much of the large blob is on disk.
STOP_AT = 16 << 20
# Where the bench VM restores to (its last source segments: jobs/, dlstage/).
RESTORE = "/root/restore"
# Where two downloads of the same sources go at once.
TWICE = "/root/restore-twice"
# The relay's log line when SIGTERM has reached it (server.rs).
SHUTTING_DOWN = "shutting down: no new transfers"
# The relay's log lines of a fetch of big.bin: started (at which offset), ended.
FETCHED = r"blob=jobs/big\.bin\}?[^\n]*relay_server::transfer::fetch: sending [^\n]*offset=(\d+)"
SENT = r"blob=jobs/big\.bin\}?[^\n]*relay_server::transfer::fetch: sent "


def var_tokens(tokens: dict) -> tuple[str, dict]:
    """The tokens file's lines for var.tokens as terraform/artifacts.tf writes
    them (a comment naming each, then the token and its containers; no list
    for "any container"), with a fresh token per name as random_password
    makes them; and {name: token}."""
    made = {name: secrets.token_hex(24) for name in tokens}
    text = "".join(f"# {name}\n{made[name]}{' ' + ','.join(cs) if cs else ''}\n" for name, cs in tokens.items())
    return text, made


def partial_name(container: str, blob: str) -> str:
    """The partial file relay-client writes a blob to (download/place.rs):
    `.relay-HEX.relay-partial`, HEX 128 bits of SHA-256(container, newline, blob)."""
    identity = hashlib.sha256(container.encode() + b"\n" + blob.encode()).hexdigest()[:32]
    return f".relay-{identity}.relay-partial"


def reader_of(tokens: dict, container: str) -> str:
    """The name of a var.tokens entry that may read `container` (`:r`/`:rw`)."""
    for name, cs in tokens.items():
        if any(c in (f"{container}:r", f"{container}:rw") for c in cs):
            return name
    raise StageFailed(f"no entry of tokens in rehearsal.tfvars may read {container} (:r or :rw)")


class DownloadStage:
    def download(self, sources: str, token: str, extra: str = "", timeout: float = 300) -> subprocess.CompletedProcess:
        return self.vms["bench"].run(self.download_cmd(sources, token, extra), check=False, timeout=timeout)

    def download_cmd(self, sources: str, token: str, extra: str = "", to: str = RESTORE) -> str:
        return (f"export RELAY_TOKEN={token}; exec relay-client download {sources} --to {to} {extra} "
                f"--relay {infra.LB_IP}:{self.values['relay_port']} --relay-cert-sha256 {self.pki.relay_sha256()} --json")

    def bench_path(self, path: str) -> Path:
        """A path in the bench VM's mount namespace, from the host."""
        return Path(f"/proc/{self.runners['bench'].pid}/root{path}")

    def download_sources(self, readable: str) -> tuple[dict, str]:
        """Puts the blobs the stage downloads; {local path in the bench VM: sha256}
        and the sources for relay-client download."""
        v = self.values
        account = f"https://{self.storage_host}"
        # Another job's results: straight into the download container.
        self.deployer.container(account, readable)
        want = {}
        for name, size in (("jobs/big.bin", BIG), ("jobs/small-1.bin", 1 << 20), ("jobs/sub/small-2.bin", 4097)):
            src = self.run / "dl-src.bin"
            h = hashlib.sha256()
            with src.open("wb") as f:
                for off in range(0, size, 8 << 20):
                    chunk = os.urandom(min(8 << 20, size - off))
                    h.update(chunk)
                    f.write(chunk)
            self.deployer.put_blob(f"{account}/{readable}", name, src)
            want[f"{RESTORE}/{name}"] = h.hexdigest()
        (self.run / "dl-src.bin").unlink()
        # The bench VM's own uploads, through the balancer, with the same token.
        bench = self.vms["bench"]
        bench.run("mkdir -p /root/dlstage && for i in 1 2 3; do head -c $((i * 300000)) /dev/urandom "
                  "> /root/dlstage/up-$i.bin; done && sha256sum /root/dlstage/*")
        r = self.client(f"/root/dlstage --to {v['container']}", token=self.reader_token)
        check(r.returncode == 0, f"upload of the small files through the balancer: {r.stderr.strip()[-300:]}")
        for line in bench.run("sha256sum /root/dlstage/*").stdout.splitlines():
            sha, path = line.split()
            want[path.replace("/root/dlstage/", f"{RESTORE}/dlstage/")] = sha
        return want, f"{readable}/jobs {v['container']}/dlstage"

    def kill_mid_download(self, victim: str) -> None:
        """`systemctl stop` (so it stays down and the probe takes it out), then,
        once the relay has stopped its transfers, SIGKILL: its drain would
        otherwise wait out the shutdown grace for a client that never reads."""
        stops = self.journal(victim, "relay-server.service").count(SHUTTING_DOWN)
        pid = self.unit(victim, "relay-server.service")["pid"]
        self.systemctl(victim, "stop", "relay-server.service")
        self.note(f"download: {victim} stopped (systemctl stop, then SIGKILL)")
        self.allow.setdefault("BlobRelayDown", []).append(self.instance(victim))
        self.wait(f"{victim} shutting down", lambda: self.journal(victim, "relay-server.service")
                  .count(SHUTTING_DOWN) > stops, 30, step=0.05)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.wait(f"{victim} stopped", lambda: self.unit(victim, "relay-server.service").get("state")
                  in ("inactive", "failed"), 30)

    def stage_download(self) -> str:
        v = self.values
        readable = (v["download_containers"] or [None])[0]
        check(readable and readable != v["container"], f"download_containers in rehearsal.tfvars: {readable}")
        self.reader_token = self.named_tokens[reader_of(v["tokens"], readable)]
        want, sources = self.download_sources(readable)
        bench = self.vms["bench"]
        # Reading is a grant of its own: client_token (Terraform writes it with
        # the upload container, write only) is refused before any file.
        r = self.download(f"{v['container']}/dlstage", self.client_token, timeout=60)
        said = r.stdout + r.stderr
        check(r.returncode == 2 and "may not read" in said, f"client_token reading: exit {r.returncode} {said[-300:]}")
        check(not bench.run(f"ls -A {RESTORE} 2>/dev/null", check=False).stdout.strip(),
              "the refused download wrote files")

        # 1. The first run, stopped with the relay carrying it. Its small
        #    stream window keeps the relay's sending within 8 MiB of what the
        #    client has read, so the relay is still sending big.bin when stopped.
        started = self.balancer_state_after(time.time())["_written"]
        first = subprocess.Popen([*bench.nsenter(), "/bin/sh", "-c",
                                  self.download_cmd(sources, self.reader_token, "--stream-window 8MiB")],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        partial = self.bench_path(f"{RESTORE}/jobs/{partial_name(readable, 'jobs/big.bin')}")
        try:
            victim = self.wait("the download's flow on a relay", lambda: next(
                (n for n, used in self.flows_since(started).items() if used), None), 30)
            other = next(n for n in RELAYS if n != victim)

            def grown():
                if first.poll() is not None:
                    raise StageFailed(f"the first download ended (exit {first.returncode}) before "
                                      f"{STOP_AT >> 20} MiB of big.bin were on disk")
                return partial.exists() and partial.stat().st_size >= STOP_AT
            self.wait(f"{STOP_AT >> 20} MiB of big.bin in its partial file", grown, 120, step=0.02)
            # Frozen, so nothing more lands while the relay goes.
            check(Path(f"/proc/{first.pid}/comm").read_text().strip() == "relay-client",
                  "the first download's process is not relay-client")
            os.kill(first.pid, signal.SIGSTOP)

            def stopped() -> bool:
                # SIGSTOP returns before every thread has stopped: a write in
                # flight still lands. Read the size once all are stopped.
                states = []
                for task in Path(f"/proc/{first.pid}/task").iterdir():
                    try:
                        states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
                    except OSError:
                        continue
                return bool(states) and all(st in ("T", "t") for st in states)
            self.wait("every thread of the first download stopped", stopped, 10, step=0.01)
            kept = partial.stat().st_size
            self.kill_mid_download(victim)
        finally:
            if first.poll() is None:
                first.kill()
            first.communicate()
        victim_log = self.journal(victim, "relay-server.service")
        check([int(o) for o in re.findall(FETCHED, victim_log)] == [0] and not re.search(SENT, victim_log),
              f"{victim}: its journal does not show big.bin fetched once from offset 0 and never sent whole")
        check(not re.search(FETCHED, self.journal(other, "relay-server.service")),
              f"{other} fetched big.bin before the rerun")
        probe = self.values["probe"]
        self.wait(f"{victim} out of rotation", lambda: not self.balancer_flows()[victim].get("healthy"),
                  probe["interval_s"] * (probe["threshold"] + 2))

        # 2. The rerun: on the other relay, from the partial file's prefix. Its
        #    flow is pinned there, so the stopped relay is started meanwhile.
        started = self.balancer_state_after(time.time())["_written"]
        rerun = subprocess.Popen([*bench.nsenter(), "/bin/sh", "-c", self.download_cmd(sources, self.reader_token)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            flows = self.wait("the rerun's flow on a relay", lambda: (f := self.flows_since(started)) and any(
                f.values()) and f, 30)
            check(flows == {victim: 0, other: 1}, f"the rerun's flow with {victim} out: {flows}")
            self.systemctl(victim, "start", "relay-server.service")
            self.note(f"download: {victim} started")
            out, err = rerun.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            raise StageFailed("the rerun did not finish within 300 s")
        finally:
            if rerun.poll() is None:
                rerun.kill()
                rerun.communicate()
        check(rerun.returncode == 0, f"the rerun: exit {rerun.returncode}: {(out + err).strip()[-400:]}")
        (self.logs / "download.json").write_text(out)
        files = {f["path"]: f for f in json.loads(out).get("files", [])}
        check(set(files) == set(want), f"the rerun's files {sorted(files)} != {sorted(want)}")
        big = files[f"{RESTORE}/jobs/big.bin"]
        resumed = big.get("bytes_resumed", 0)
        check(big.get("status") == "downloaded" and 0 < resumed <= kept,
              f"big.bin did not resume from the partial file ({kept} bytes): {big}")
        offsets = [int(o) for o in re.findall(FETCHED, self.journal(other, "relay-server.service"))]
        check(offsets == [resumed], f"{other}: big.bin fetched from offsets {offsets}, the client resumed at {resumed}")
        check(all(f.get("status") in ("downloaded", "skipped") for f in files.values()),
              f"files not downloaded: {[f for f in files.values() if f.get('status') not in ('downloaded', 'skipped')]}")
        sums = dict(reversed(line.split()) for line in
                    bench.run(f"sha256sum {' '.join(sorted(want))}").stdout.splitlines())
        bad = {p: (sums.get(p), sha) for p, sha in want.items() if sums.get(p) != sha}
        check(not bad, f"restored files differ from their sources: {bad}")
        check(not bench.run(f"find {RESTORE} -name '*.relay-partial*'").stdout.strip(), "partial files left")
        checks = sorted({f["check"] for f in files.values() if f.get("check")})

        # 3. Two downloads of the same sources into one fresh folder at once:
        #    one writer per partial file, the other waits and then finds the
        #    file placed; both end 0 and every file is its source's.
        twice = self.twice_at_once(sources, want)

        # 4. The relay back in rotation, as the later stages expect it.
        self.wait(f"{victim} back in rotation", lambda: self.balancer_flows()[victim].get("healthy"),
                  probe["interval_s"] * 3 + 10)
        n_down = sum(1 for f in files.values() if f.get("status") == "downloaded")
        return (f"{len(want)} files ({BIG >> 20} MiB + 5 small; {readable} of download_containers, written by another "
                f"job, and {v['container']}, uploaded through the balancer) downloaded through the balancer with a "
                f"tokens-file `{readable}:r` grant, the relays reading with their managed identity over HTTPS; "
                f"client_token (write only) refused; {victim} stopped (then SIGKILL) while sending big.bin, "
                f"{kept >> 20} MiB of it on disk: the "
                f"rerun went to {other} and resumed at {resumed} bytes ({n_down} files fetched, the rest already "
                f"whole), checks {', '.join(checks)}; every file's sha256 equals its source's; {twice}; {victim} "
                f"back in rotation")

    def twice_at_once(self, sources: str, want: dict) -> str:
        """Two downloads of `sources` into one folder, started together: both
        exit 0, every file is downloaded by one and downloaded or skipped by
        the other, every file's sha256 equals its source's, no partial file
        is left."""
        bench = self.vms["bench"]
        cmd = self.download_cmd(sources, self.reader_token, to=TWICE)
        runs = [subprocess.Popen([*bench.nsenter(), "/bin/sh", "-c", cmd], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = []
        try:
            for r in runs:
                outs.append(r.communicate(timeout=300))
        except subprocess.TimeoutExpired:
            raise StageFailed("two downloads at once: not finished within 300 s")
        finally:
            for r in runs:
                if r.poll() is None:
                    r.kill()
                    r.communicate()
        (self.logs / "download-twice.json").write_text("\n".join(out for out, _ in outs))
        placed = {}
        for i, (r, (out, err)) in enumerate(zip(runs, outs)):
            check(r.returncode == 0, f"two downloads at once, run {i + 1}: exit {r.returncode}: "
                  f"{(out + err).strip()[-400:]}")
            for f in json.loads(out).get("files", []):
                check(f.get("status") in ("downloaded", "skipped"), f"two downloads at once, run {i + 1}: {f}")
                if f.get("status") == "downloaded":
                    placed[f["path"]] = placed.get(f["path"], 0) + 1
        mine = {p.replace(RESTORE, TWICE, 1): sha for p, sha in want.items()}
        check(set(placed) == set(mine) and all(n == 1 for n in placed.values()),
              f"two downloads at once: each file placed once, by one of them: {placed}")
        sums = dict(reversed(line.split()) for line in
                    bench.run(f"sha256sum {' '.join(sorted(mine))}").stdout.splitlines())
        bad = {p: (sums.get(p), sha) for p, sha in mine.items() if sums.get(p) != sha}
        check(not bad, f"two downloads at once: files differ from their sources: {bad}")
        check(not bench.run(f"find {TWICE} -name '*.relay-partial*'").stdout.strip(),
              "two downloads at once: partial files left")
        return (f"two downloads of the same sources into one folder at once both exit 0, each of the "
                f"{len(mine)} files placed once and its sha256 its source's")
