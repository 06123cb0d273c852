#!/usr/bin/env bash
# Rehearsal stage "alerts": the operators' day-one monitoring in
# deploy/monitoring/ (docs/MONITORING.md, "Alerts and dashboard").
#
#   1. promtool check rules deploy/monitoring/relay-alerts.yml
#   2. the recorded series in relay-alerts.test.yml are exactly the files in
#      deploy/monitoring/testdata/ (tests/rehearsal/record_metrics.py embed --check)
#   3. promtool test rules deploy/monitoring/relay-alerts.test.yml: each alert
#      fires, and only when it should, on /metrics recorded from real relays
#   4. the dashboard: JSON, valid PromQL, and the rules, the dashboard and
#      the recordings name only series a real relay-server serves on /metrics
#      (tests/rehearsal/alerts_lint.py starts one on loopback)
#   5. with --recording DIR (scripts/rehearse passes its logs): the rules on
#      the series scraped from the rehearsal's own relays (DIR/scrapes.jsonl,
#      DIR/alerts-events.json; tests/rehearsal/alert_test.py writes the test,
#      with every firing set computed by alert_oracle.py): each alert fires
#      where the scrapes show its condition, on the relay the rehearsal
#      produced it on, and nowhere else
#
# Usage: alerts.sh [--bin-dir DIR] [--recording DIR]   (relay-server; default
# $CARGO_TARGET_DIR/debug or target/debug). Needs promtool (Debian:
# prometheus) and python3. Prints one line per step and last:
#   alerts: 8 rules checked; N recorded scenarios, M alert checks passed; ...
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
mon=$repo/deploy/monitoring
bin_dir=${CARGO_TARGET_DIR:-$repo/target}/debug
recording=
while [ $# -gt 0 ]; do
    case "$1" in
    --bin-dir) bin_dir=$2; shift 2 ;;
    --recording) recording=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "alerts: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

fail() {
    echo "alerts: FAILED: $*" >&2
    exit 1
}
command -v promtool >/dev/null || fail "promtool is not installed (Debian: apt-get install prometheus)"
[ -x "$bin_dir/relay-server" ] || fail "$bin_dir/relay-server missing: cargo build -p relay-server"

out=$(promtool check rules "$mon/relay-alerts.yml" 2>&1) || { echo "$out" >&2; fail "promtool check rules"; }
rules=$(sed -n 's/.*SUCCESS: \([0-9]*\) rules found.*/\1/p' <<<"$out")
echo "alerts: promtool check rules: $rules rules"

python3 "$here/record_metrics.py" embed --check || fail "recorded series out of date"

out=$(promtool test rules "$mon/relay-alerts.test.yml" 2>&1) || { echo "$out" >&2; fail "promtool test rules"; }
scenarios=$(grep -c '^ *# recorded: testdata/' "$mon/relay-alerts.test.yml")
cases=$(grep -cE '^ *- (\{ ?)?eval_time:' "$mon/relay-alerts.test.yml")
echo "alerts: promtool test rules: $cases alert checks on $scenarios recorded scenarios passed"

lint=$(python3 "$here/alerts_lint.py" "$bin_dir/relay-server") || fail "dashboard and series check"
echo "alerts: $lint"

rehearsed=
if [ -n "$recording" ]; then
    [ -s "$recording/scrapes.jsonl" ] && [ -s "$recording/alerts-events.json" ] ||
        fail "no recording from the rehearsal in $recording (scrapes.jsonl, alerts-events.json)"
    rehearsed=$(python3 "$here/alert_test.py" --scrapes "$recording/scrapes.jsonl" \
        --events "$recording/alerts-events.json" --rules "$mon/relay-alerts.yml" \
        --out "$recording/rehearsal-alerts.test.yml" --summary "$recording/rehearsal-alerts.json") ||
        fail "the rehearsal's recording (alert_test.py)"
    out=$(promtool test rules "$recording/rehearsal-alerts.test.yml" 2>&1) ||
        { echo "$out" | head -40 >&2; fail "promtool test rules on the rehearsal's recording ($recording/rehearsal-alerts.test.yml)"; }
    echo "alerts: rehearsal's own relays: $rehearsed"
    rehearsed="; on the rehearsal's relays $rehearsed"
fi
echo "alerts: $rules rules checked; $scenarios recorded scenarios, $cases alert checks passed; ${lint%%,*}, every series exported by the relay$rehearsed"
