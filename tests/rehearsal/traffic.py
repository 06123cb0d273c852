"""The rehearsal's traffic stages: uploads from the bench VM through the
balancer (CRC-64, the balancer itself, deploy/compare.sh, failover, token
refresh). A mixin of `rehearse.Rehearsal`: it uses its VMs, deployer and
unit-runner state."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import signal
import subprocess
import threading
import time

import infra
from errors import StageFailed, check
from recording import BURST
from tfmodel import DEPLOY
from units import parse_unit, seconds

RELAYS = ["relay-1", "relay-2"]
# The balancer stage's client with several connections: all of them hashed
# to one relay has probability 2^-15.
MULTI_CONNECTIONS = 16
MULTI_FILES = 16


class TrafficStages:
    def client(self, args: str, token: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        env = f"RELAY_TOKEN={token or self.client_token} " if token is not False else ""
        pin = self.pki.relay_sha256()
        cmd = (f"{env}relay-client upload {args} --relay {infra.LB_IP}:{self.values['relay_port']} "
               f"--relay-cert-sha256 {pin} --json")
        return self.vms["bench"].run(cmd, check=False, timeout=timeout)

    def stage_crc64(self) -> str:
        bench = self.vms["bench"]
        bench.run("head -c 12582912 /dev/urandom > /root/crc.bin && sha256sum /root/crc.bin > /root/crc.sha")
        sha = bench.read_file("/root/crc.sha").decode().split()[0]
        r = self.client(f"/root/crc.bin --to {self.values['container']}/rehearsal --block-size 5MiB")
        check(r.returncode == 0, f"upload through the relay: {r.stderr.strip()[-400:]}")
        time.sleep(0.6)  # the front end writes its counts every 250 ms
        stats = infra.read_json(self.run / "uploads-front.json")
        check(stats.get("corrupted") == 1 and stats.get("crc64_mismatched") == 1,
              f"one corrupted body refused with Crc64Mismatch: {stats}")
        check(stats.get("crc64_matched", 0) == stats.get("put_block", 0) - 1 >= 3,
              f"every other Put Block carried a matching CRC-64: {stats}")
        retried = [n for n in RELAYS if "Crc64Mismatch" in self.journal(n, "relay-server.service")]
        check(retried, "no relay logged the Crc64Mismatch retry")
        meta = self.deployer.get_blob(f"https://{self.storage_host}/{self.values['container']}/rehearsal/crc.bin",
                                      self.run / "crc.bin")
        got = hashlib.sha256((self.run / "crc.bin").read_bytes()).hexdigest()
        check(got == sha and meta.get("sha256") == sha, f"blob sha {got} / metadata {meta.get('sha256')} != {sha}")
        return (f"uploads front end recomputed Azure's CRC-64 of {stats['crc64_matched'] + 1} Put Block bodies; the one "
                f"it corrupted was refused 400 Crc64Mismatch, {retried[0]} sent it again, the blob downloads with its "
                f"sha256")

    def stage_compare(self) -> str:
        bench = self.vms["bench"]
        r = bench.run("cd /root && blob-relay-compare --file-mib 24 --files 2 --small-count 6 --runs 1 "
                      "--connections 4 --keep --out /root/compare.md", check=False, timeout=400)
        report = bench.read_file("/root/compare.md.json").decode() if r.returncode in (0, 1) else "{}"
        (self.logs / "compare.json").write_text(report)
        check(r.returncode == 0, f"blob-relay-compare exited {r.returncode}: {r.stderr.strip()[-600:]}")
        rows = json.loads(report).get("rows", [])
        methods = sorted({row["method"] for row in rows})
        check(rows and all(row["verified"] for row in rows), f"rows not verified: {rows}")
        check(any("relay" in m for m in methods) and any("direct" in m for m in methods), f"methods {methods}")
        # Every blob, downloaded and hashed here, equals its sha256 metadata.
        container = f"https://{self.storage_host}/{self.values['container']}"
        names = self.deployer.list_blobs(container, "bench")
        for name in names:
            meta = self.deployer.get_blob(f"{container}/{name}", self.run / "blob")
            got = hashlib.sha256((self.run / "blob").read_bytes()).hexdigest()
            check(meta.get("sha256") == got, f"{name}: sha256 metadata {meta.get('sha256')} != content {got}")
        check(names, "no bench blobs kept")
        imds = [json.loads(l) for l in (self.logs / "imds.jsonl").read_text().splitlines()]
        return (f"deploy/compare.sh as installed on the bench VM (relay-client bench: {', '.join(methods)}; direct with "
                f"the bench VM's managed identity via IMDS, {sum(1 for e in imds if e['vm'] == 'bench')} token requests), "
                f"{len(rows)} runs verified, {len(names)} blobs downloaded and equal to their sha256")

    def stage_balancer(self) -> str:
        st = infra.read_json(self.run / "balancer.json")
        probe = st.get("_probe", {})
        v = self.values["probe"]
        check(probe == {"port": v["port"], "path": v["path"], "interval_s": v["interval_s"], "threshold": v["threshold"]},
              f"probe {probe} != azurerm_lb_probe {v}")
        def flows():
            st = self.balancer_state_after(time.time())
            return {n: st.get(self.net.ip(n), {}).get("flows_total", 0) for n in RELAYS}
        # Each upload is a new client socket (a new source port, so a new
        # 5-tuple): upload until both relays have had a flow, at most 20 times
        # (by the hash, 20 ports all on one relay: 2^-19).
        bench = self.vms["bench"]
        bench.run("head -c 1000000 /dev/urandom > /root/lb.bin")
        uploads = 0
        while not all(flows().values()) and uploads < 20:
            uploads += 1
            r = self.client(f"/root/lb.bin --to {self.values['container']}/rehearsal/lb-{uploads} ")
            check(r.returncode == 0, f"upload {uploads} via the balancer: {r.stderr.strip()[-300:]}")
        got = flows()
        check(all(got.values()), f"flows per relay {got} after {uploads} more uploads")
        multi = self.several_connections(flows)
        return (f"UDP frontend {infra.LB_IP}:{self.values['relay_port']} spreading flows by 5-tuple hash; probe "
                f"HTTP {v['path']} on :{v['port']} every {v['interval_s']} s, out after {v['threshold']} failures "
                f"(from azurerm_lb_probe); clients' flows landed on both relays {got}; {multi}")

    def several_connections(self, flows) -> str:
        """One client, MULTI_CONNECTIONS QUIC connections (each its own UDP
        port): its flows land on both relays, both commit its files, and every
        blob downloads with its SHA-256. All of them on one relay by the hash:
        2^(1 - MULTI_CONNECTIONS)."""
        bench = self.vms["bench"]
        bench.run(f"mkdir -p /root/multi && for i in $(seq {MULTI_FILES}); do "
                  f"head -c 262144 /dev/urandom > /root/multi/f$i; done && cd /root && sha256sum multi/* > multi.sha")
        want = dict(reversed(line.split()) for line in bench.read_file("/root/multi.sha").decode().splitlines())
        started = self.balancer_state_after(time.time())["_written"]
        r = self.client(f"/root/multi --to {self.values['container']} --relay-connections {MULTI_CONNECTIONS}")
        check(r.returncode == 0, f"upload over {MULTI_CONNECTIONS} connections: {r.stderr.strip()[-300:]}")
        summary = json.loads(r.stdout)
        check(summary.get("connections") == MULTI_CONNECTIONS,
              f"the client made {summary.get('connections')} connections, not {MULTI_CONNECTIONS}")
        new = self.flows_since(started)
        check(sum(new.values()) == MULTI_CONNECTIONS and all(new.values()),
              f"the client's {MULTI_CONNECTIONS} flows per relay: {new}")
        committed = {n: len(re.findall(r"blob=multi/f\d+[^\n]*: relay_server::transfer: committed ",
                                       self.journal(n, "relay-server.service"))) for n in RELAYS}
        check(all(committed.values()) and sum(committed.values()) == MULTI_FILES,
              f"the client's files committed per relay (journals): {committed}")
        container = f"https://{self.storage_host}/{self.values['container']}"
        for name, sha in want.items():
            meta = self.deployer.get_blob(f"{container}/{name}", self.run / "blob")
            got = hashlib.sha256((self.run / "blob").read_bytes()).hexdigest()
            check(got == sha == meta.get("sha256"), f"{name}: blob {got} / metadata {meta.get('sha256')} != {sha}")
        return (f"one client with --relay-connections {MULTI_CONNECTIONS}: its flows landed on both relays {new}, "
                f"its {MULTI_FILES} files were committed by both {committed}, every blob downloads with its sha256")

    def flows_since(self, t0: float) -> dict:
        """Per relay, the client addresses that sent datagrams after `t0`, from a
        state the balancer took after this call. Counted by address, not by
        flows_total: a connection on a source port an earlier client used
        continues that flow entry (same 5-tuple, same relay) without a new flow."""
        st = self.balancer_state_after(time.time())
        return {n: sum(1 for t in st.get(self.net.ip(n), {}).get("last_seen", {}).values() if t > t0)
                for n in RELAYS}

    def balancer_state_after(self, t: float) -> dict:
        """The balancer's state as it took it after `t` (it writes once a second)."""
        return self.wait("a balancer state written after the check began",
                         lambda: (st := infra.read_json(self.run / "balancer.json")).get("_written", 0) > t and st,
                         10, step=0.1)

    def balancer_flows(self) -> dict:
        st = infra.read_json(self.run / "balancer.json")
        return {n: st.get(self.net.ip(n), {}) for n in RELAYS}

    def interrupted_upload(self, name: str, interrupt) -> dict:
        """Uploads 160 MiB from the bench VM through the balancer; once 6 of its
        blocks reached storage, calls interrupt(relay carrying its flow). Blocks
        are cut in stream order, so the first ones (the prefix a resume starts
        from) are staged well before the sixth arrives. Returns what happened,
        after checking that the blob verifies and the client resumed."""
        bench = self.vms["bench"]
        bench.run(f"head -c {160 << 20} /dev/urandom > /root/{name}.bin && sha256sum /root/{name}.bin > /root/{name}.sha")
        sha = bench.read_file(f"/root/{name}.sha").decode().split()[0]
        started = self.balancer_state_after(time.time())["_written"]
        put_blocks = infra.read_json(self.run / "uploads-front.json").get("put_block", 0)
        pin = self.pki.relay_sha256()
        upload = subprocess.Popen(
            [*bench.nsenter(), "/bin/sh", "-c",
             f"RELAY_TOKEN={self.client_token} relay-client upload /root/{name}.bin --to {self.values['container']}/failover "
             f"--block-size 5MiB --relay {infra.LB_IP}:{self.values['relay_port']} --relay-cert-sha256 {pin} --json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        victim = self.wait("the upload's flow on a relay", lambda: next(
            (n for n, used in self.flows_since(started).items() if used), None), 30)
        self.wait("blocks staged", lambda: infra.read_json(self.run / "uploads-front.json").get("put_block", 0)
                  >= put_blocks + 6, 120, step=0.05)
        interrupt(victim)
        try:
            out, err = upload.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            upload.kill()
            raise StageFailed("the upload did not finish within 300 s of the interruption")
        check(upload.returncode == 0, f"upload after the interruption: {(out + err).strip()[-400:]}")
        resumed = sum(f.get("bytes_resumed", 0) for f in json.loads(out).get("files", []))
        meta = self.deployer.get_blob(f"https://{self.storage_host}/{self.values['container']}/failover/{name}.bin",
                                      self.run / f"{name}.bin")
        got = hashlib.sha256((self.run / f"{name}.bin").read_bytes()).hexdigest()
        check(got == sha == meta.get("sha256"), f"{name}: blob {got} / metadata {meta.get('sha256')} != {sha}")
        check(resumed > 0, f"{name}: the client did not resume from the staged prefix (bytes_resumed {resumed})")
        line = rf"blob=failover/{name}\.bin[^\n]*: relay_server::transfer: committed "
        committed_by = [n for n in RELAYS if re.search(line, self.journal(n, "relay-server.service"))]
        check(len(committed_by) == 1, f"{name}: committed by {committed_by}")
        return {"victim": victim, "resumed_mib": resumed >> 20, "committed_by": committed_by[0]}

    def stage_failover(self) -> str:
        # 1. Killed: Restart=on-failure (RestartSec=2s) brings the relay back
        #    before the probe's second failure, so the flow stays on it.
        seen = {}

        def kill(victim):
            unit = self.unit(victim, "relay-server.service")
            seen["restarts"] = unit["restarts"]
            os.kill(unit["pid"], signal.SIGKILL)
            self.note(f"failover: {victim} killed (SIGKILL)")

        killed = self.interrupted_upload("killed", kill)
        after = self.unit(killed["victim"], "relay-server.service")
        check(after["restarts"] == seen["restarts"] + 1 and after["state"] == "active",
              f"{killed['victim']}: Restart=on-failure: {after}")
        # 2. Stopped (and kept down): the probe takes it out, the flow moves to
        #    the other relay, which resumes from what the first one staged.
        probe = self.values["probe"]

        def stop(victim):
            self.systemctl(victim, "stop", "relay-server.service")
            self.note(f"failover: {victim} stopped (systemctl stop)")
            # Down for as long as the failover takes: a minute or more on a
            # loaded machine, which is BlobRelayDown's condition.
            self.allow["BlobRelayDown"] = [self.instance(victim)]
            self.wait(f"{victim} out of rotation", lambda: not self.balancer_flows()[victim].get("healthy"),
                      probe["interval_s"] * (probe["threshold"] + 2))

        stopped = self.interrupted_upload("stopped", stop)
        victim = stopped["victim"]
        other = next(n for n in RELAYS if n != victim)
        check(stopped["committed_by"] == other, f"the stopped relay's upload was committed by {stopped['committed_by']}")
        bench = self.vms["bench"]
        bench.run("head -c 100000 /dev/urandom > /root/small.bin")
        started = self.balancer_state_after(time.time())["_written"]
        for i in range(3):
            r = self.client(f"/root/small.bin --to {self.values['container']}/failover/out-{i}")
            check(r.returncode == 0, f"upload with {victim} out: {r.stderr.strip()[-300:]}")
        used = self.flows_since(started)
        check(used[victim] == 0 and used[other] == 3, f"flows with {victim} out: {used}")
        self.systemctl(victim, "start", "relay-server.service")
        self.note(f"failover: {victim} started")
        self.wait(f"{victim} back in rotation", lambda: self.balancer_flows()[victim].get("healthy"),
                  probe["interval_s"] * 3 + 10)
        back = self.balancer_state_after(time.time())["_written"]
        tries = 0
        while not self.flows_since(back)[victim] and tries < 20:
            tries += 1
            r = self.client(f"/root/small.bin --to {self.values['container']}/failover/in-{tries}")
            check(r.returncode == 0, f"upload with {victim} back: {r.stderr.strip()[-300:]}")
        check(self.flows_since(back)[victim], f"{victim} took no new flow")
        same = killed["committed_by"] == killed["victim"]
        return (f"160 MiB uploads interrupted after 6 blocks: {killed['victim']} killed (SIGKILL), Restart=on-failure "
                f"brought it back ({after['restarts']} restart) and the client resumed {killed['resumed_mib']} MiB on "
                f"{killed['committed_by']}{' (back before the probe noticed)' if same else ''}; {victim} stopped: the "
                f"probe took it out and the client resumed {stopped['resumed_mib']} MiB on {other}; both blobs verify; "
                f"3 new flows all went to {other}; {victim} started: the probe put it back and it took a new flow")

    def stage_tokens(self) -> str:
        timer = self.unit("relay-1", "blob-relay-tokens.timer")
        check(timer.get("state") == "active", f"blob-relay-tokens.timer not active: {timer}")
        pids = {n: self.unit(n, "relay-server.service")["pid"] for n in RELAYS}
        bench = self.vms["bench"]
        bench.run("head -c 100000 /dev/urandom > /root/tok.bin")
        r = self.client(f"/root/tok.bin --to {self.values['container']}/tokens/before", token=self.revoked_token)
        check(r.returncode == 0, f"the old token before the change: {r.stderr.strip()[-300:]}")
        new_token = secrets.token_hex(24)
        v = self.values
        tokens_v2 = (f"# client_token\n{self.client_token} {v['container']}\n"
                     f"# rehearsal-new\n{new_token} {v['container']}\n")
        self.deployer.put_blob(self.relay_boot, "tokens", tokens_v2.encode())
        t0 = time.monotonic()
        # While the timer is due: the alerts stage's refusals (recording.py).
        refused_by = {}
        burst_thread = threading.Thread(target=lambda: refused_by.update(n=self.refusal_burst()), daemon=True)
        burst_thread.start()
        # Within the timer's period (OnUnitActiveSec + RandomizedDelaySec), plus the run itself.
        t = self.units_timer()
        self.wait("the new tokens file on both relays", lambda: all(
            self.vms[n].read_file("/etc/blob-relay/tokens").decode() == tokens_v2 for n in RELAYS), t + 20, step=1)
        took = time.monotonic() - t0
        burst_thread.join(timeout=300)
        burst = refused_by.get("n", 0)
        check(burst == BURST, f"refusal burst: {burst} of {BURST} uploads refused (exit 2)")
        self.expect["BlobRelayRefusalsRising"] = None
        time.sleep(3)  # the relay's own file check: every 2 s
        r_new = self.client(f"/root/tok.bin --to {v['container']}/tokens/new", token=new_token)
        check(r_new.returncode == 0, f"the new token: {r_new.stderr.strip()[-300:]}")
        refused = 0
        for i in range(2):  # one upload per relay is not guaranteed by the hash: both must refuse any
            r_old = self.client(f"/root/tok.bin --to {v['container']}/tokens/old-{i}", token=self.revoked_token)
            said = r_old.stdout + r_old.stderr
            check(r_old.returncode != 0 and "refused the token" in said, f"the removed token: {said[-300:]}")
            refused += 1
        for n in RELAYS:
            mode = self.vms[n].run("stat -c '%U:%G %a' /etc/blob-relay/tokens").stdout.strip()
            check(mode == "root:blob-relay 640", f"{n}: tokens file {mode}")
            check(self.unit(n, "relay-server.service")["pid"] == pids[n], f"{n}: relay-server restarted")
            check("blob-relay-tokens.timer: elapsed" in self.journal(n, "runner"), f"{n}: the timer never ran")
        return (f"new tokens blob reached both relays through blob-relay-tokens.timer/.service in {took:.0f} s "
                f"(period {t:.0f} s); the new token uploads, the removed one is refused ({refused} tries), "
                f"no relay restarted; meanwhile {burst} uploads with an unknown token refused (alerts stage)")

    def units_timer(self) -> float:
        conf = parse_unit((DEPLOY / "blob-relay-tokens.timer").read_text(), {})
        return seconds(conf["Timer"]["OnUnitActiveSec"][-1]) + seconds(conf["Timer"]["RandomizedDelaySec"][-1])
