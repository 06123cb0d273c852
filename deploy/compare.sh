#!/bin/bash
# compare.sh: the comparative run on the benchmark source VM: a thin wrapper
# around `relay-client bench` (generated files uploaded through the relay and
# directly with the VM's managed identity, alternating, verified, deleted
# afterwards) that adds the deployment's context and writes a Markdown report.
#
# *** NEEDS A REAL AZURE DEPLOYMENT. ***
# Run it on the benchmark source VM that terraform/ creates when
# bench_source_region is set (installed there as blob-relay-compare, with
# its settings in /etc/blob-relay/bench.env). Off Azure, run
# `relay-client bench` itself; here only `--dry-run` is exercised offline.
#
# Usage: sudo blob-relay-compare [options]
#   --env-file FILE   settings (default /etc/blob-relay/bench.env)
#   --file-mib N      size of each large file in MiB (default 4096)
#   --files N         number of large files (default 4)
#   --small-count N   number of 1 MiB files beside them (default 64)
#   --runs N          runs of each method (default 3)
#   --connections N   direct upload: Put Block requests in flight per file (default 16)
#   --workdir DIR     where the files are generated (default: the VM's temp
#                     disk /mnt if present, else /var/tmp)
#   --out FILE        Markdown report (default ./compare-DATE.md); the bench's
#                     JSON goes beside it (FILE.json)
#   --keep            keep the uploaded blobs
#   --dry-run         print what would run; generate and upload nothing
#
# Settings (environment or env file):
#   BENCH_RELAY, BENCH_RELAY_CERT_SHA256 (or BENCH_RELAY_CERT_SHA256_FILE,
#   written at boot by blob-relay-fetch), BENCH_STORAGE_URL, BENCH_CONTAINER,
#   BENCH_TOKEN_FILE (or RELAY_TOKEN), BENCH_SOURCE_REGION,
#   BENCH_SOURCE_VM_SIZE, BENCH_RELAY_REGION, BENCH_RELAY_VM_SIZE,
#   BENCH_RELAY_COUNT.
# Direct uploads authenticate with the VM's managed identity (Storage Blob
# Data Contributor on the upload container, granted by terraform/); the VM
# has no Azure CLI.
set -euo pipefail

env_file=/etc/blob-relay/bench.env
file_mib=4096
files=4
small_count=64
runs=3
connections=16
workdir=
out=
keep=
dry_run=0

die() {
    echo "compare.sh: $*" >&2
    exit 1
}

while [ $# -gt 0 ]; do
    case "$1" in
    --env-file) env_file=$2; shift 2 ;;
    --file-mib) file_mib=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --small-count) small_count=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --workdir) workdir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --keep) keep=--keep; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
    esac
done

if [ -f "$env_file" ]; then
    # shellcheck disable=SC1090
    . "$env_file"
fi
if [ -z "${BENCH_RELAY_CERT_SHA256:-}" ] && [ -n "${BENCH_RELAY_CERT_SHA256_FILE:-}" ] &&
    [ -r "$BENCH_RELAY_CERT_SHA256_FILE" ]; then
    BENCH_RELAY_CERT_SHA256=$(tr -d ' \n' <"$BENCH_RELAY_CERT_SHA256_FILE")
fi
for v in BENCH_RELAY BENCH_RELAY_CERT_SHA256 BENCH_STORAGE_URL BENCH_CONTAINER; do
    [ -n "${!v:-}" ] || die "$v is not set (env file $env_file)"
done
case "$BENCH_STORAGE_URL" in https://*) ;; *) die "BENCH_STORAGE_URL must be https://ACCOUNT.blob.core.windows.net" ;; esac

if [ -z "${RELAY_TOKEN:-}" ] && [ -n "${BENCH_TOKEN_FILE:-}" ] && [ -r "$BENCH_TOKEN_FILE" ]; then
    RELAY_TOKEN=$(head -n1 "$BENCH_TOKEN_FILE")
fi
export RELAY_TOKEN=${RELAY_TOKEN:-}
[ "$dry_run" = 1 ] || [ -n "$RELAY_TOKEN" ] || die "no token: set RELAY_TOKEN or BENCH_TOKEN_FILE"

if [ -z "$workdir" ]; then
    if [ -d /mnt ] && [ -w /mnt ]; then workdir=/mnt/blob-relay-bench; else workdir=/var/tmp/blob-relay-bench; fi
fi
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${out:-./compare-$stamp.md}
json="$out.json"

bench=(relay-client bench
    --relay "$BENCH_RELAY" --relay-cert-sha256 "$BENCH_RELAY_CERT_SHA256"
    --to "$BENCH_CONTAINER/bench"
    --storage-url "$BENCH_STORAGE_URL" --entra managed-identity --connections "$connections"
    --large-size "${file_mib}MiB" --large-count "$files"
    --small-size 1MiB --small-count "$small_count"
    --runs "$runs" --workdir "$workdir/$stamp" --json)
[ -z "$keep" ] || bench+=("$keep")

status=0
if [ "$dry_run" = 1 ]; then
    printf 'would run:'
    printf ' %q' "${bench[@]}"
    printf '\n'
    echo '{"rows": [], "dry_run": true}' >"$json"
else
    echo "compare.sh: ${bench[*]}" >&2
    "${bench[@]}" >"$json" || status=$?
    rm -rf "${workdir:?}/$stamp"
fi

# --- report ------------------------------------------------------------------
{
    echo "# Blob Relay: relay vs direct upload"
    echo
    echo "| | |"
    echo "| --- | --- |"
    echo "| date (UTC) | $(date -u '+%Y-%m-%d %H:%M') |"
    echo "| source | ${BENCH_SOURCE_REGION:-?}, ${BENCH_SOURCE_VM_SIZE:-?} |"
    echo "| relay | ${BENCH_RELAY_REGION:-?}, ${BENCH_RELAY_COUNT:-1} x ${BENCH_RELAY_VM_SIZE:-?} |"
    echo "| storage | $BENCH_STORAGE_URL/$BENCH_CONTAINER |"
    echo "| data | $files x $file_mib MiB + $small_count x 1 MiB, random |"
    echo "| relay-client | $( (relay-client --version 2>/dev/null || echo unknown) | head -n1) |"
    if [ "$dry_run" = 1 ]; then
        echo "| note | DRY RUN: nothing was uploaded |"
    fi
    echo
    echo "| method | run | seconds | Mbit/s | verified |"
    echo "| --- | --- | --- | --- | --- |"
    python3 - "$json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for row in r.get("rows", []):
    ok = "yes" if row["verified"] else "no: " + (row.get("error") or "")
    print(f"| {row['method']} | {row['run']} | {row['seconds']:.1f} | {row['goodput_mbit_s']:.0f} | {ok} |")
if r.get("ratio_relay_direct") is not None:
    print(f"\nRatio relay/direct (median goodput): {r['ratio_relay_direct']:.2f}; "
          f"QUIC RTT to the relay: {r.get('rtt_ms') or 0:.1f} ms.")
PY
} >"$out"
echo "compare.sh: report written to $out (bench JSON: $json)" >&2
exit "$status"
