#!/usr/bin/env python3
"""The monitoring files against what the relay really exports.

    alerts_lint.py RELAY_SERVER_BINARY

Starts RELAY_SERVER_BINARY on loopback (storage pointed at a closed port: the
page is served all the same, every series from the start) and reads its
/metrics. Then:
  - every series the alert rules and the dashboard's queries name is on that
    page (or is Prometheus' own: up, ALERTS);
  - every series in the recorded test data (deploy/monitoring/testdata) is
    on that page, so recordings from an older relay are noticed;
  - each dashboard query is valid PromQL (as a recording rule through
    `promtool check rules`, Grafana's $__rate_interval and $instance
    replaced by values);
  - the dashboard is JSON with unique panel ids, each with a title and a
    query.
Prints one line, or each problem on stderr and exits 1.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
# Series Prometheus makes itself.
PROMETHEUS_OWN = {"up", "ALERTS", "ALERTS_FOR_STATE"}
# Metric names in a PromQL expression: blob_relay_* and Prometheus' own.
NAME = re.compile(r"\b(blob_relay_[a-z0-9_]+|up|ALERTS)\b")
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def free_port(kind=socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exported(binary: Path) -> set[str]:
    """Sample names on a real relay's /metrics page."""
    with tempfile.TemporaryDirectory(prefix="alerts-lint.") as d:
        tokens = Path(d) / "tokens"
        tokens.write_text("alerts-lint-token-0123456789\n")
        health = f"127.0.0.1:{free_port()}"
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "RELAY_LISTEN": f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}",
            # A closed port: the storage check fails, the page is there anyway.
            "RELAY_STORAGE_URL": f"http://127.0.0.1:{free_port()}/devstoreaccount1",
            "RELAY_ACCOUNT_KEY": KEY,
            "RELAY_TOKENS": str(tokens),
            "RELAY_STATE_DIR": str(Path(d) / "state"),
            "RELAY_HEALTH_LISTEN": health,
            "RELAY_MEMORY_BUDGET": "64MiB",
        }
        log = (Path(d) / "relay.log").open("w")
        p = subprocess.Popen([str(binary)], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(f"http://{health}/metrics", timeout=2) as r:
                        page = r.read().decode()
                    break
                except OSError:
                    if p.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(f"alerts: relay-server did not serve /metrics: "
                                         f"{(Path(d) / 'relay.log').read_text()[-2000:]}")
                    time.sleep(0.1)
        finally:
            p.terminate()
            p.wait()
    names = set()
    for line in page.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


def rule_exprs() -> list[str]:
    """The `expr:` of every rule (single-line or a `|` block)."""
    out: list[str] = []
    lines = (MONITORING / "relay-alerts.yml").read_text().splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)expr:\s*(.*)$", line)
        if not m:
            continue
        if m.group(2).strip() != "|":
            out.append(m.group(2))
            continue
        block = []
        for nxt in lines[i + 1 :]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= len(m.group(1)):
                break
            block.append(nxt)
        out.append("\n".join(block))
    return out


def dashboard_exprs(dash: dict, problems: list[str]) -> list[str]:
    out: list[str] = []
    ids = [p.get("id") for p in dash.get("panels", [])]
    if len(ids) != len(set(ids)):
        problems.append("dashboard: panel ids are not unique")
    for p in dash.get("panels", []):
        targets = [t.get("expr", "") for t in p.get("targets", [])]
        if not p.get("title") or not any(targets):
            problems.append(f"dashboard: panel {p.get('id')} has no title or no query")
        out += [t for t in targets if t]
    out += [a["expr"] for a in dash.get("annotations", {}).get("list", []) if a.get("expr")]
    return out


def recorded_names() -> set[str]:
    names = set()
    for f in sorted((MONITORING / "testdata").glob("*.yml")):
        names |= set(re.findall(r"^- series: '([a-zA-Z_:][a-zA-Z0-9_:]*)", f.read_text(), re.M))
    return names


def promql_valid(exprs: list[str], problems: list[str]) -> None:
    """Each query as a recording rule, so promtool parses it."""
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, e in enumerate(exprs):
        concrete = e.replace("$__rate_interval", "1m").replace("$instance", ".*")
        lines += [f"      - record: dashboard_query_{i}", f"        expr: {json.dumps(concrete)}"]
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    try:
        r = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f"dashboard: a query is not valid PromQL: {r.stdout}{r.stderr}")
    finally:
        os.unlink(f.name)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    live = exported(Path(argv[0]))
    problems: list[str] = []
    try:
        dash = json.loads((MONITORING / "relay-dashboard.json").read_text())
    except ValueError as e:
        print(f"alerts: relay-dashboard.json is not JSON: {e}", file=sys.stderr)
        return 1
    dexprs = dashboard_exprs(dash, problems)
    promql_valid(dexprs, problems)
    for where, exprs in (("relay-alerts.yml", rule_exprs()), ("relay-dashboard.json", dexprs)):
        for e in exprs:
            for n in set(NAME.findall(e)) - live - PROMETHEUS_OWN:
                problems.append(f"{where}: {n} is not a series the relay exports (in: {e.strip()[:80]})")
    stale = recorded_names() - live - PROMETHEUS_OWN
    for n in sorted(stale):
        problems.append(f"testdata: {n} was recorded but the relay no longer exports it: re-record")
    if problems:
        for p in problems:
            print(f"alerts: {p}", file=sys.stderr)
        return 1
    print(f"dashboard: {len(dash['panels'])} panels, {len(dexprs)} queries, valid PromQL; "
          f"rules, dashboard and recordings name only series the relay exports ({len(live)} on its page)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
