"""tests/rehearsal/alert_oracle.py and alert_test.py: the rehearsal's alerts
stage computes, from the scrapes, which alerts must fire when; these pin its
PromQL arithmetic to Prometheus' and check that promtool agrees with it on a
recording with every condition in it (when promtool is installed)."""

import json
import math
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tfmodel import REPO

sys.path.insert(0, str(REPO / "tests" / "rehearsal"))

import alert_oracle as oracle  # noqa: E402
import alert_test  # noqa: E402

RULES = REPO / "deploy" / "monitoring" / "relay-alerts.yml"


def test_rate_extrapolates_as_prometheus_does():
    # 21 samples covering the whole 5-minute window, +15 each: exactly 1/s.
    points = [(t * 15.0, t * 15.0) for t in range(21)]
    assert oracle.extrapolated(points, 300.0, 300, True) == pytest.approx(1.0)
    # A counter that appears inside the window is not extrapolated below zero.
    assert oracle.extrapolated([(90.0, 0.0), (105.0, 20.0)], 105.0, 300, True) == pytest.approx(20 / 300)
    # A reset (relay restarted) adds the value before it back: 3 + 2.
    assert oracle.extrapolated([(0.0, 5.0), (15.0, 8.0), (30.0, 2.0)], 30.0, 30, False) == pytest.approx(5.0)
    assert oracle.extrapolated([(0.0, 5.0)], 0.0, 300, True) is None


def test_histogram_quantile_interpolates_within_the_bucket():
    inf = math.inf
    assert oracle.quantile(0.99, [(10.0, 99), (30.0, 100), (inf, 100)]) == pytest.approx(10.0)
    assert oracle.quantile(0.99, [(10.0, 98), (30.0, 100), (inf, 100)]) == pytest.approx(20.0)
    assert oracle.quantile(0.99, [(10.0, 1), (60.0, 1), (inf, 3)]) == 60.0
    assert math.isnan(oracle.quantile(0.99, [(10.0, 0), (inf, 0)]))


def test_for_needs_the_condition_at_every_evaluation_and_unsure_stays_unsure():
    T, F, U = oracle.T, oracle.F, oracle.U
    assert oracle.firing([F, T, T, T, T, T], 4) == [F, F, F, F, F, T]
    assert oracle.firing([T, T, U, T, T, T], 2) == [F, F, U, U, U, T]
    assert oracle.firing([T, T, F, T], 0) == [T, T, F, T]


def test_the_rules_file_is_the_one_modelled_and_a_changed_rule_is_refused():
    alerts = oracle.check_rules(RULES.read_text())
    assert {a.name: a.for_s for a in alerts}["BlobRelayCommitLatencyHigh"] == 180
    with pytest.raises(ValueError, match="BlobRelayRefusalsRising"):
        oracle.check_rules(RULES.read_text().replace("> 0.05", "> 0.5"))


LES = ["0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "10.0", "30.0", "60.0", "+Inf"]


def page(inst, st):
    def name(metric, **kw):
        labels = dict(kw, job="blob-relay", instance=inst)
        return metric + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    p = {name("blob_relay_storage_reachable"): st["reach"], name("blob_relay_budget_bytes"): 1 << 30,
         name("blob_relay_budget_in_use_bytes"): 0,
         name("blob_relay_failures_total", **{"class": "storage", "code": "storage"}): 0}
    for s in ("503", "transport"):
        p[name("blob_relay_azure_retries_total", status=s)] = 0
    if st["rej"] is not None:
        p[name("blob_relay_rejections_total", reason="unauthorized")] = st["rej"]
    for le in LES:
        p[name("blob_relay_commit_seconds_bucket", le=le)] = st["fast"] + (st["slow"] if float(le) > 10 else 0)
    return p


def scrapes(tmp_path):
    """Two relays: a slow commit on relay-1, a refusal burst on relay-2,
    then relay-2 gone and relay-1's storage unreachable."""
    lines = [json.dumps({"t0": 0, "interval": 15})]
    s1 = dict(reach=1, rej=None, fast=0, slow=0)
    s2 = dict(reach=1, rej=None, fast=0, slow=0)
    for k in range(16):
        s1["fast"] += 3
        s2["fast"] += 2
        s1["slow"] = 1 if k >= 2 else 0
        if k == 6:
            s2["rej"] = 0
        if 7 <= k <= 8:
            s2["rej"] += 20
        if k >= 13:
            s1["reach"] = 0
        pages = {"relay-1:9090": page("relay-1:9090", s1),
                 "relay-2:9090": None if k >= 14 else page("relay-2:9090", s2)}
        lines.append(json.dumps({"k": k, "t": k * 15, "pages": pages}))
    path = tmp_path / "scrapes.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def build(tmp_path, expect):
    events = tmp_path / "events.json"
    events.write_text(json.dumps({"events": [{"k": 2, "what": "slow commit"}], "expect": expect}))
    args = SimpleNamespace(scrapes=scrapes(tmp_path), events=events, rules=RULES, out=tmp_path / "t.yml")
    return alert_test.build(args), args.out


EXPECT = {"BlobRelayDown": "relay-2:9090", "BlobRelayStorageUnreachable": "relay-1:9090",
          "BlobRelayCommitLatencyHigh": "relay-1:9090", "BlobRelayRefusalsRising": None}


def test_each_condition_fires_its_alert_on_its_relay_only(tmp_path):
    summary, _ = build(tmp_path, EXPECT)
    assert summary["problems"] == []
    fired = {name: [w.split()[0] for w in where] for name, where in summary["fired"].items()}
    assert fired == {"BlobRelayDown": ["relay-2:9090"], "BlobRelayStorageUnreachable": ["relay-1:9090"],
                     "BlobRelayCommitLatencyHigh": ["relay-1:9090"], "BlobRelayRefusalsRising": ["relay-2:9090"]}
    # The held part is what lets the 2-minute rule fire on a short outage.
    assert any("(held)" in w for w in summary["fired"]["BlobRelayStorageUnreachable"])


def test_an_alert_expected_on_the_wrong_relay_is_a_problem(tmp_path):
    summary, _ = build(tmp_path, dict(EXPECT, BlobRelayDown="relay-1:9090"))
    assert any("BlobRelayDown" in p for p in summary["problems"])


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_agrees_with_the_oracle_and_fails_a_wrong_expectation(tmp_path):
    _, test_file = build(tmp_path, EXPECT)
    ok = subprocess.run(["promtool", "test", "rules", str(test_file)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # Claim the refusals alert is quiet where the oracle says it fires.
    text = test_file.read_text()
    fires = "alertname=\"BlobRelayRefusalsRising\"}'\n        eval_time: 180s\n        exp_samples:\n"
    assert fires in text
    start = text.index(fires) + len(fires)
    end = text.index("      - expr:", start)
    wrong = tmp_path / "wrong.yml"
    wrong.write_text(text[:start - len("\n")] + " []\n" + text[end:])
    bad = subprocess.run(["promtool", "test", "rules", str(wrong)], capture_output=True, text=True)
    assert bad.returncode != 0 and "BlobRelayRefusalsRising" in bad.stdout + bad.stderr
