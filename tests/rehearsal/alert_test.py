"""The alerts stage's test on the rehearsal's own relays: turns the scrapes
the rehearsal took (scrape.py: both relays' /metrics every 15 s from the
balancer's namespace, from boot to the end of the traffic stages) into a
`promtool test rules` file, and writes into it what must fire when.

    alert_test.py --scrapes FILE --events FILE --rules relay-alerts.yml --out TEST.yml

Input series: the samples as recorded, at the real interval (a failed
scrape is `up` 0, a series gone from a page is marked stale, as Prometheus
does). Then the held part: the rehearsal ends in the state it wants alerts
for (a relay stopped, the uploads account unreachable), but holds it for
about a minute, not for the rules' `for:` periods (up to 3 min, plus the
30 s storage check): the last recorded scrape is repeated for the longest
`for:` plus two intervals. A held sample is a copy of a real one; nothing
is invented but its persistence, and the file's header says where the
recorded part ends.

Expected: at every sample, for every rule, the exact set of firing alerts
that alert_oracle.py computes from those series (its own evaluation of the
rules' expressions and `for:`), written as promtool checks of
`ALERTS{alertstate="firing", alertname=...}`: each alert fires where the
series show its condition long enough, and nowhere else (no other
instance, no other time). Times where the oracle is unsure (a value within
1 % of a threshold, a window edge Prometheus 2 and 3 treat differently) get
no check for that rule. `--events` names, per alert the rehearsal
produced, the instance it must fire on (`expect`) and the others it may
fire on (`allow`: the failover stage's stopped relay may stay down a
minute): the series must make it fire there, and on no other instance.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import alert_oracle as oracle  # noqa: E402
from record_metrics import JOB, promtool_values, series_name  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def load_scrapes(path: Path) -> tuple[float, list[dict[str, dict | None]]]:
    interval, samples = 15.0, []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        if "t0" in d:
            interval = float(d["interval"])
        else:
            samples.append(d["pages"])
    return interval, samples


def series_of(samples: list[dict[str, dict | None]]) -> dict[str, list]:
    """Per series, its value at each sample (None: no sample), `up` added."""
    instances = sorted({i for s in samples for i in s})
    out: dict[str, list] = {}
    for inst in instances:
        out[series_name("up", {"job": JOB, "instance": inst})] = [
            1.0 if s.get(inst) is not None else 0.0 for s in samples]
        names = sorted({n for s in samples if s.get(inst) for n in s[inst]})
        for n in names:
            out[n] = [(s.get(inst) or {}).get(n) for s in samples]
    return out


def input_text(series: dict[str, list]) -> list[str]:
    lines = []
    for name, values in series.items():
        lines += [f"      - series: '{name}'", f"        values: '{promtool_values(values)}'"]
    return lines


def alerts_series(name: str, labels: tuple) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted((*labels, ("alertname", name), ("alertstate", "firing"))))
    return "ALERTS{" + inner + "}"


def at(seconds: float) -> str:
    return f"{int(seconds)}s"


def build(args) -> dict:
    interval, samples = load_scrapes(args.scrapes)
    events = json.loads(args.events.read_text())
    alerts = oracle.check_rules(args.rules.read_text())
    if len(samples) < 4:
        raise SystemExit(f"alert_test: only {len(samples)} scrapes recorded")
    recorded = len(samples)
    held = round(max(a.for_s for a in alerts) / interval) + 2
    samples = samples + [samples[-1]] * held
    series = series_of(samples)
    rec = oracle.Recording(series, interval)
    exp = oracle.expected(rec, alerts)
    checks, unsure, first = [], 0, {}
    for a in alerts:
        for k in range(rec.n):
            states = {labels: row[k] for labels, row in exp[a.name].items()}
            if oracle.U in states.values():
                unsure += 1
                continue
            fire = sorted(labels for labels, s in states.items() if s == oracle.T)
            for labels in fire:
                inst = dict(labels).get("instance")
                first.setdefault((a.name, inst), k)
            checks.append((k, a.name, fire))
    # The alerts the rehearsal produced: on the instance it produced them on,
    # and on no other.
    problems = []
    for name, inst in events.get("expect", {}).items():
        where = sorted({i for (n, i) in first if n == name})
        allowed = {inst, *events.get("allow", {}).get(name, [])}
        if inst is None:
            if not where:
                problems.append(f"{name}: the recording never holds its condition for its for: on any relay")
        elif inst not in where or not set(where) <= allowed:
            problems.append(f"{name}: expected to fire on {inst} (and may on {sorted(allowed - {inst})}); "
                            f"the series make it fire on {where or 'none'}")
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    lines = [
        "# Written by tests/rehearsal/alert_test.py from the rehearsal's own scrapes",
        f"# (scripts/rehearse at {commit}): both relays' /metrics from the balancer's",
        f"# namespace every {interval:g} s, sample k at k*{interval:g}s. Samples 0-{recorded - 1} are recorded;",
        f"# {recorded}-{recorded + held - 1} hold sample {recorded - 1} (the longest for: plus two intervals).",
        "# Events (sample: what):",
        *[f"#   {e['k']}: {e['what']}" for e in events.get("events", [])],
        f"rule_files: [{json.dumps(str(args.rules.resolve()))}]",
        f"evaluation_interval: {interval:g}s",
        "tests:",
        "  - name: \"the rehearsal's relays, as scraped\"",
        f"    interval: {interval:g}s",
        "    input_series:",
        *input_text(series),
        "    promql_expr_test:",
    ]
    for k, name, fire in checks:
        lines.append(f"      - expr: 'ALERTS{{alertstate=\"firing\",alertname=\"{name}\"}}'")
        lines.append(f"        eval_time: {at(k * interval)}")
        if not fire:
            lines.append("        exp_samples: []")
            continue
        lines.append("        exp_samples:")
        for labels in fire:
            lines.append(f"          - labels: '{alerts_series(name, labels)}'")
            lines.append("            value: 1")
    args.out.write_text("\n".join(lines) + "\n")
    fired = {}
    for (name, inst), k in sorted(first.items(), key=lambda x: x[1]):
        part = "recorded" if k < recorded else "held"
        fired.setdefault(name, []).append(f"{inst} from sample {k} ({part})")
    return {"recorded": recorded, "held": held, "checks": len(checks), "unsure": unsure,
            "firing_checks": sum(1 for _, _, f in checks if f), "fired": fired, "problems": problems}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scrapes", type=Path, required=True)
    ap.add_argument("--events", type=Path, required=True)
    ap.add_argument("--rules", type=Path, default=REPO / "deploy/monitoring/relay-alerts.yml")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--summary", type=Path)
    args = ap.parse_args()
    summary = build(args)
    if args.summary:
        args.summary.write_text(json.dumps(summary, indent=1))
    for p in summary["problems"]:
        print(f"alert_test: {p}", file=sys.stderr)
    if summary["problems"]:
        return 1
    fired = "; ".join(f"{name} on {', '.join(where)}" for name, where in summary["fired"].items())
    print(f"{summary['checks']} checks ({summary['firing_checks']} with alerts firing, {summary['unsure']} unsure "
          f"left out) on {summary['recorded']} scrapes of both relays plus {summary['held']} held: {fired}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
