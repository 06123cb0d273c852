#!/bin/bash
# run.sh BIN OUT [N] [SIZE] [RUNS] [-- extra download flags]
#
# Loopback, no emulated link: one in-memory Azurite, one relay-server, both
# from BIN (a target/debug or target/release folder). N files of SIZE bytes
# (random) are uploaded once through the relay (sealed), then downloaded RUNS
# times into fresh folders under /usr/bin/time -v, each checked file by file
# against its source's SHA-256. Per run: the client's wall and CPU seconds
# (time -v), the relay's CPU seconds over the download (/proc/PID/stat), and
# the download's report. Then one run under `strace -c -f` (syscall counts), and with PERF=1 one under `perf record`.
set -euo pipefail
BIN=$(realpath "$1"); OUT=$(realpath -m "$2"); N=${3:-2000}; SIZE=${4:-65536}; RUNS=${5:-3}
shift $(( $# < 5 ? $# : 5 )); [ "${1:-}" = "--" ] && shift; EXTRA=("$@")
ROOT=$(cd "$(dirname "$0")/../../../.." && pwd)
KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
TOKEN=dlsmall-bench-token-0123456789
W=$(mktemp -d /tmp/dlsmall.XXXXXX)
mkdir -p "$OUT"
port() { python3 -c 'import socket,sys; s=socket.socket(socket.AF_INET, getattr(socket, sys.argv[1])); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' "$1"; }
AZPORT=$(port SOCK_STREAM); RPORT=$(port SOCK_DGRAM)
AZPID=; RPID=
cleanup() { [ -n "$RPID" ] && kill "$RPID" 2>/dev/null; [ -n "$AZPID" ] && kill "$AZPID" 2>/dev/null; wait 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
"$ROOT/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$AZPORT" --inMemoryPersistence \
    --disableTelemetry --skipApiVersionCheck --silent </dev/null >/dev/null 2>&1 &
AZPID=$!
for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/$AZPORT) 2>/dev/null && break; sleep 0.1; done
STORAGE=http://127.0.0.1:$AZPORT/devstoreaccount1
echo "$TOKEN bench:rw" > "$W/tokens"
"$BIN/relay-server" --listen "127.0.0.1:$RPORT" --storage-url "$STORAGE" --account-key "$KEY" \
    --tokens "$W/tokens" --id-key-file "$W/id.key" --state-dir "$W/state" \
    --cert-fingerprint-file "$W/fp" --memory-budget 512MiB </dev/null >/dev/null 2>"$W/relay.log" &
RPID=$!
for _ in $(seq 300); do [ -s "$W/fp" ] && break; sleep 0.1; done
FP=$(cat "$W/fp")
python3 - "$W/src/run" "$N" "$SIZE" <<'PY'
import os, sys
d, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(d, exist_ok=True)
for i in range(n):
    with open(os.path.join(d, f"f{i:06d}.bin"), "wb") as f:
        f.write(os.urandom(size))
PY
(cd "$W/src/run" && sha256sum -- * | sort -k2) > "$W/want.sha256"
export RELAY_TOKEN=$TOKEN XDG_STATE_HOME=$W/xdg
echo x > "$W/one"
"$BIN/relay-client" upload "$W/one" --direct --create-container --storage-url "$STORAGE" \
    --account-key "$KEY" --to bench/setup --quiet >/dev/null
"$BIN/relay-client" upload "$W/src/run" --relay "127.0.0.1:$RPORT" --relay-cert-sha256 "$FP" \
    --to bench --json --quiet > "$OUT/seed.json"
relay_cpu() { awk '{printf "%.2f\n", ($14 + $15) / 100}' "/proc/$RPID/stat"; }
{
    echo "bin: $BIN"; "$BIN/relay-client" --version; echo "files: $N x $SIZE bytes; flags: ${EXTRA[*]:-}"
    echo "date: $(date -u +%FT%TZ); loadavg before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/summary.txt"
dl() {  # dl TAG [wrapper...]
    local tag=$1; shift
    local to=$W/dl-$tag r0 r1
    r0=$(relay_cpu)
    "$@" "$BIN/relay-client" download bench/run --to "$to" --relay "127.0.0.1:$RPORT" \
        --relay-cert-sha256 "$FP" --json --quiet "${EXTRA[@]}" > "$OUT/$tag.json"
    r1=$(relay_cpu)
    (cd "$to/run" && sha256sum -- * | sort -k2) > "$W/got.sha256"
    if cmp -s "$W/want.sha256" "$W/got.sha256"; then v=verified; else v=MISMATCH; fi
    echo "$tag: relay_cpu_s=$(echo "$r1 - $r0" | bc) files=$v" >> "$OUT/summary.txt"
    rm -rf "$to"
}
for i in $(seq "$RUNS"); do
    dl "run$i" /usr/bin/time -v -o "$OUT/run$i.time"
    grep -E "Elapsed|User time|System time|Maximum resident|context switches|File system outputs" "$OUT/run$i.time" \
        | sed "s/^/  run$i /" >> "$OUT/summary.txt"
done
dl strace strace -c -f -o "$OUT/strace.txt"
# PERF=1: one more run under perf record (flat, every thread), then its top symbols.
if [ -n "${PERF:-}" ]; then
    dl perf perf record -q -F 1999 -o "$W/perf.data" --
    perf report -i "$W/perf.data" --no-children --sort dso,sym --stdio 2>/dev/null \
        | grep -v '^#' | grep -v '^$' | head -60 > "$OUT/perf-top.txt"
fi
echo "loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
