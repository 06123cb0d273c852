"""deploy/monitoring/: the recorder's conversion of scrapes into promtool input
series (tests/rehearsal/record_metrics.py), and promtool on the rules when it
is installed (tests/rehearsal/alerts.sh runs the full stage)."""

import shutil
import subprocess
import sys

import pytest

from tfmodel import REPO

sys.path.insert(0, str(REPO / "tests" / "rehearsal"))

import record_metrics as rm  # noqa: E402

PAGE = """# HELP blob_relay_bytes_received Bytes.
# TYPE blob_relay_bytes_received counter
blob_relay_bytes_received_total 7
blob_relay_bytes_received_created 1.7e9
blob_relay_azure_retries_total{status="503"} 2
blob_relay_commit_seconds_bucket{le="+Inf"} 3
# EOF
"""


def test_a_scrape_becomes_series_with_the_target_labels():
    s = rm.parse_page(PAGE)
    assert s == {
        'blob_relay_bytes_received_total{instance="relay-1:9090",job="blob-relay"}': 7.0,
        'blob_relay_azure_retries_total{instance="relay-1:9090",job="blob-relay",status="503"}': 2.0,
        'blob_relay_commit_seconds_bucket{instance="relay-1:9090",job="blob-relay",le="+Inf"}': 3.0,
    }


def test_runs_are_compressed_in_promtool_notation():
    assert rm.values_text(["0", "0", "0", "1", "2", "2"]) == "0x2 1 2 2"
    assert rm.values_text(["1", "stale", "_", "_", "_"]) == "1 stale _x3"
    assert rm.values_text(["_", "3"]) == "_ 3"


def test_a_failed_scrape_is_up_0_and_vanished_series_go_stale():
    a = 'x{instance="relay-1:9090",job="blob-relay"}'
    rows = dict(rm.input_series([{a: 1.0}, {a: 2.0}, None, None, {a: 5.0}]))
    assert rows['up{instance="relay-1:9090",job="blob-relay"}'] == "1 1 0 0 1"
    assert rows[a] == "1 2 stale _ 5"


def test_the_test_file_holds_exactly_the_recordings():
    text = rm.TEST_FILE.read_text()
    assert rm.embedded(text) == text, "run: python3 tests/rehearsal/record_metrics.py embed"
    used = {m.group(2) for line in text.splitlines() if (m := rm.BEGIN.match(line))}
    assert used == {p.name for p in rm.TESTDATA.glob("*.yml")}


def test_an_edited_recording_is_noticed(tmp_path, monkeypatch):
    data = tmp_path / "testdata"
    shutil.copytree(rm.TESTDATA, data)
    f = data / "relay-down.yml"
    f.write_text(f.read_text().replace("values: '1x4 0x9'", "values: '1x5 0x8'"))
    monkeypatch.setattr(rm, "TESTDATA", data)
    text = rm.TEST_FILE.read_text()
    assert rm.embedded(text) != text


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool not installed (Debian: prometheus)")
def test_promtool_checks_and_tests_the_rules():
    mon = REPO / "deploy" / "monitoring"
    r = subprocess.run(["promtool", "check", "rules", str(mon / "relay-alerts.yml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["promtool", "test", "rules", str(mon / "relay-alerts.test.yml")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
