"""What the alerts stage is tested on: the rehearsal's relays scraped as
Prometheus would scrape them, through the stages that produce the alerts'
conditions. A mixin of `rehearse.Rehearsal` (its VMs, network, journals).

From the end of the booted stage, scrape.py (in the balancer's namespace)
takes both relays' /metrics every 15 s. The conditions come from the stages
themselves, noted against the sample numbers in logs/alerts-events.json:

- a relay down: the failover stage's kill and stop (the stopped relay may
  stay down over a minute on a loaded machine: allowed to fire);
- refusals rising: during the token stage's wait for its timer, a burst of
  uploads with a token no relay knows;
- at the end: an upload whose Put Block List the uploads front end holds
  12 s (commit latency, above the rule's 10 s), then the other relay stopped
  for good (down) and the front end stopped, so the committing relay's
  storage check fails (storage unreachable).

The end state is held until each shows in two scrapes; tests/rehearsal/alert_test.py then holds the last scrape for
the rules' `for:` (docs/REHEARSAL.md: the alerts stage).
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from pathlib import Path

import infra
from errors import StageFailed, check
from vm import ns_name

HERE = Path(__file__).resolve().parent
RELAYS = ["relay-1", "relay-2"]
INTERVAL_S = 15
# Uploads with an unknown token in the burst: the rule wants more than 0.05
# refusals a second over 5 min (15) on one relay; the balancer's hash splits
# them, so both relays usually pass it, and one always does.
BURST = 48


class AlertRecording:
    def instance(self, relay: str) -> str:
        return f"{relay}:{self.values['health_port']}"

    def start_recording(self) -> None:
        self.scrapes = self.logs / "scrapes.jsonl"
        self.events: list[dict] = []
        # Per alert the rehearsal produces: the instance it must fire on
        # (None: any), and the others it may fire on.
        self.expect: dict[str, str | None] = {}
        self.allow: dict[str, list[str]] = {}
        self.spawn(["ip", "netns", "exec", ns_name("balancer"), sys.executable, str(HERE / "scrape.py"),
                    *sum((["--target", f"{n}={self.net.ip(n)}:{self.values['health_port']}"] for n in RELAYS), []),
                    "--interval", str(INTERVAL_S), "--out", str(self.scrapes)], "scrape.log")
        self.scraper = self.procs[-1]
        self.wait("the first scrape", lambda: self.samples(), 10, step=0.1)
        self.note("scrapes begin (both relays up)")

    def samples(self) -> list[dict]:
        try:
            lines = self.scrapes.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines if line.strip() and '"pages"' in line]

    def t0(self) -> float:
        return json.loads(self.scrapes.read_text().splitlines()[0])["t0"]

    def note(self, what: str) -> None:
        """An event, numbered by the first scrape that can show it."""
        k = math.ceil((time.time() - self.t0()) / INTERVAL_S)
        self.events.append({"k": k, "what": what})

    def refusal_burst(self) -> int:
        """BURST uploads with a token no relay knows, four at a time, through
        the balancer; each is refused at its Offer. Returns how many were."""
        bench = self.vms["bench"]
        bench.run("head -c 1000 /dev/urandom > /root/refused.bin")
        pin = self.pki.relay_sha256()
        one = (f"RELAY_TOKEN=unknown-$i-$$ relay-client upload /root/refused.bin --to {self.values['container']}/"
               f"refused/$i --relay {infra.LB_IP}:{self.values['relay_port']} --relay-cert-sha256 {pin} --json "
               f"--patience 0 >/dev/null 2>&1; echo $? >> /tmp/refused.rc")
        loop = f"for i in $(seq {BURST // 4}); do {one}; done"
        self.note(f"refusal burst: {BURST} uploads with a token no relay knows, through the balancer")
        bench.run("rm -f /tmp/refused.rc; " + " & ".join([f"( {loop} )"] * 4) + " & wait", timeout=300)
        codes = bench.read_file("/tmp/refused.rc").decode().split()
        self.note("refusal burst ends")
        return sum(1 for c in codes if c == "2")

    def slow_commit(self) -> str:
        """One 12 MiB upload through the balancer whose Put Block List the
        uploads front end holds 12 s (above the commit-latency rule's 10 s).
        Returns the relay that committed it."""
        bench = self.vms["bench"]
        bench.run("head -c 12582912 /dev/urandom > /root/slow.bin")
        (self.run / "slow-commit").touch()
        self.note("a 12 MiB upload whose Put Block List the uploads front end holds 12 s (a slow commit)")
        r = self.client(f"/root/slow.bin --to {self.values['container']}/slow --block-size 5MiB")
        check(r.returncode == 0, f"the slow-commit upload: {r.stderr.strip()[-300:]}")
        commit_ms = json.loads(r.stdout)["files"][0]["relay_ms"]["commit_ms"]
        check(commit_ms >= 12000, f"the held Put Block List: the relay's commit took {commit_ms} ms")
        return self.commit_of(r"slow/slow\.bin")

    def record_outage(self) -> str:
        """The end state the long alerts are tested on: a slow commit, then
        the other relay stopped and the uploads account unreachable for the
        one that committed it (its front end stopped), so neither relay
        restarts after the slow commit (a restart resets the histogram, and
        Prometheus would not see the slow commit then). Waits until two
        scrapes show each, then stops scraping."""
        slow = self.slow_commit()
        other = next(n for n in RELAYS if n != slow)
        k0 = len(self.samples())
        self.systemctl(other, "stop", "relay-server.service")
        self.front.terminate()
        self.note(f"{other} stopped (systemctl stop); the uploads account's front end stopped")
        up, down = self.instance(slow), self.instance(other)

        def shown() -> bool:
            after = self.samples()[k0:]
            stopped = sum(1 for s in after if s["pages"].get(down) is None)
            unreachable = sum(1 for s in after if any(
                k.startswith("blob_relay_storage_reachable{") and v == 0
                for k, v in (s["pages"].get(up) or {}).items()))
            return stopped >= 2 and unreachable >= 2
        # The relay checks storage every 30 s (each check up to 20 s).
        self.wait(f"{other} down and {slow}'s storage unreachable in two scrapes each", shown,
                  30 + 20 + 3 * INTERVAL_S, step=1)
        self.scraper.terminate()
        self.scraper.wait(timeout=10)
        self.note("scrapes end")
        self.expect.update({"BlobRelayCommitLatencyHigh": up, "BlobRelayDown": down,
                            "BlobRelayStorageUnreachable": up})
        n = len(self.samples())
        (self.logs / "alerts-events.json").write_text(json.dumps(
            {"interval": INTERVAL_S, "events": self.events, "expect": self.expect, "allow": self.allow}, indent=1))
        return f"{n} scrapes of both relays, {len(self.events)} events"

    def commit_of(self, blob_re: str) -> str:
        """The relay whose journal shows the commit of the blob."""
        line = rf"blob={blob_re}[^\n]*: relay_server::transfer: committed "
        by = [n for n in RELAYS if re.search(line, self.journal(n, "relay-server.service"))]
        check(len(by) == 1, f"{blob_re}: committed by {by}")
        return by[0]


__all__ = ["AlertRecording", "StageFailed"]
