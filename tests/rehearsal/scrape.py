"""Prometheus' scrapes of the rehearsal's relays, for the alerts stage: run in
the balancer's namespace (where the load balancer's probe also reaches the
relays' health port), it GETs every target's /metrics on a fixed schedule,
sample k at t0 + k * INTERVAL, all targets at once, and appends one JSON line
per sample to --out:

    {"k": 0, "t": 1764700000.0, "pages": {"relay-1:9090": {series: value}, "relay-2:9090": null}}

null: the scrape failed (connection refused, timeout, not 200), which
Prometheus records as `up` 0. The first line is {"t0": ..., "interval": ...}.
The rehearsal (rehearse.py) notes its events against these sample numbers;
tests/rehearsal/alert_test.py turns the file into promtool's input series.

Usage: python3 scrape.py --target NAME=HOST:PORT [--target ...] --interval 15 --out FILE
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_metrics import parse_page  # noqa: E402


def scrape(url: str, instance: str, timeout: float) -> dict[str, float] | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            if r.status != 200:
                return None
            return parse_page(r.read().decode(), instance)
    except (OSError, ValueError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", action="append", required=True, help="NAME=HOST:PORT; instance label NAME:PORT")
    ap.add_argument("--interval", type=float, default=15.0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    targets = {}
    for t in args.target:
        name, _, addr = t.partition("=")
        targets[f"{name}:{addr.rsplit(':', 1)[1]}"] = f"http://{addr}/metrics"
    # Prometheus' default scrape timeout is 10 s, and below the interval.
    timeout = min(10.0, args.interval / 2)
    t0 = time.time()
    with args.out.open("a") as out:
        out.write(json.dumps({"t0": t0, "interval": args.interval}) + "\n")
        out.flush()
        k = 0
        while True:
            pages: dict = {}
            threads = [threading.Thread(target=lambda i=i, u=u: pages.__setitem__(i, scrape(u, i, timeout)))
                       for i, u in targets.items()]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            out.write(json.dumps({"k": k, "t": t0 + k * args.interval, "pages": pages}) + "\n")
            out.flush()
            k += 1
            time.sleep(max(0.0, t0 + k * args.interval - time.time()))


if __name__ == "__main__":
    sys.exit(main())
