#!/bin/bash
# compare.sh: upload the same generated files from a source VM to Azure Blob
# Storage through the relay, directly (relay-client upload --direct) and with
# AzCopy if it is installed; time each and write a Markdown table.
#
# *** NEEDS A REAL AZURE DEPLOYMENT. ***
# Run it on the benchmark source VM that terraform/ creates when
# bench_source_region is set (installed there as blob-relay-compare, with
# its settings in /etc/blob-relay/bench.env). It cannot run in the offline
# lab or in CI; there, only `--dry-run` is exercised.
#
# Usage: sudo blob-relay-compare [options]
#   --env-file FILE   settings (default /etc/blob-relay/bench.env)
#   --file-mib N      size of each generated file in MiB (default 4096)
#   --files N         number of files (default 4)
#   --runs N          repetitions of each method (default 3)
#   --workdir DIR     where the files are generated (default: the VM's temp
#                     disk /mnt if present, else /var/tmp)
#   --out FILE        Markdown report (default ./compare-DATE.md)
#   --methods LIST    comma-separated subset of relay,direct,azcopy
#   --dry-run         print what would run; generate and upload nothing
#
# Settings (environment or env file):
#   BENCH_RELAY, BENCH_RELAY_CERT_SHA256 (or BENCH_RELAY_CERT_SHA256_FILE,
#   written at boot by blob-relay-fetch), BENCH_STORAGE_URL, BENCH_CONTAINER,
#   BENCH_TOKEN_FILE (or RELAY_TOKEN), BENCH_SOURCE_REGION,
#   BENCH_SOURCE_VM_SIZE, BENCH_RELAY_REGION, BENCH_RELAY_VM_SIZE,
#   BENCH_RELAY_COUNT.
# Direct uploads and AzCopy authenticate with the VM's managed identity
# (Storage Blob Data Contributor on the upload container, granted by
# terraform/).
set -euo pipefail

env_file=/etc/blob-relay/bench.env
file_mib=4096
files=4
runs=3
workdir=
out=
methods=relay,direct,azcopy
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
    --runs) runs=$2; shift 2 ;;
    --workdir) workdir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --methods) methods=$2; shift 2 ;;
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
prefix="bench/$stamp"
data="$workdir/$stamp"

run() {
    if [ "$dry_run" = 1 ]; then
        printf 'would run:'
        printf ' %q' "$@"
        printf '\n'
    else
        "$@"
    fi
}

have_method() {
    case ",$methods," in *",$1,"*) return 0 ;; *) return 1 ;; esac
}

# --- generate the files (random: nothing compresses) -------------------------
run mkdir -p "$data"
for i in $(seq 1 "$files"); do
    run dd if=/dev/urandom of="$data/file-$i.bin" bs=1M count="$file_mib" status=none
done
total_bytes=$((files * file_mib * 1024 * 1024))

# --- the methods -------------------------------------------------------------
upload_relay() {
    run relay-client upload "$data"/file-*.bin \
        --relay "$BENCH_RELAY" \
        --relay-cert-sha256 "$BENCH_RELAY_CERT_SHA256" \
        --to "$BENCH_CONTAINER/$prefix/relay-$1"
}

upload_direct() {
    run relay-client upload "$data"/file-*.bin \
        --direct --storage-url "$BENCH_STORAGE_URL" --entra managed-identity \
        --to "$BENCH_CONTAINER/$prefix/direct-$1"
}

upload_azcopy() {
    export AZCOPY_AUTO_LOGIN_TYPE=MSI
    run azcopy copy "$data/*" \
        "$BENCH_STORAGE_URL/$BENCH_CONTAINER/$prefix/azcopy-$1/" \
        --block-size-mb 16 --log-level ERROR
}

rows=()
for method in relay direct azcopy; do
    have_method "$method" || continue
    if [ "$method" = azcopy ] && ! command -v azcopy >/dev/null && [ "$dry_run" = 0 ]; then
        rows+=("| azcopy | - | - | - | not installed |")
        continue
    fi
    for r in $(seq 1 "$runs"); do
        echo "compare.sh: $method run $r/$runs" >&2
        start=$(date +%s.%N)
        status=ok
        "upload_$method" "$r" || status="failed ($?)"
        end=$(date +%s.%N)
        secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
        mbit=$(awk -v s="$secs" -v n="$total_bytes" 'BEGIN { if (s > 0) printf "%.0f", n * 8 / s / 1e6; else print "-" }')
        rows+=("| $method | $r | $secs | $mbit | $status |")
    done
done

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
    echo "| data | $files files x $file_mib MiB = $((total_bytes / 1024 / 1024)) MiB, random |"
    echo "| relay-client | $( (relay-client --version 2>/dev/null || echo unknown) | head -n1) |"
    echo "| azcopy | $( (azcopy --version 2>/dev/null || echo not installed) | head -n1) |"
    if [ "$dry_run" = 1 ]; then
        echo "| note | DRY RUN: nothing was uploaded; the times are meaningless |"
    fi
    echo
    echo "| method | run | seconds | Mbit/s | result |"
    echo "| --- | --- | --- | --- | --- |"
    printf '%s\n' "${rows[@]}"
} >"$out"
echo "compare.sh: report written to $out" >&2

run rm -rf "$data"
