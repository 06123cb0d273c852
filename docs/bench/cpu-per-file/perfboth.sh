#!/bin/bash
# perfboth.sh BINDIR OUT [DELAY SECONDS]: waits for relay-client of /work/cpu-bins/BINDIR, then
# DELAY s in (default 5) samples relay and client for SECONDS s (default 5).
# The 2026-12-04 profiles used DELAY 1, SECONDS 4 (their runs are short).
B=/work/cpu-bins/$1
for i in $(seq 1 1200); do C=$(pgrep -f "^$B/relay-client" | head -1); [ -n "$C" ] && break; sleep 0.2; done
R=$(pgrep -f "^$B/relay-server" | head -1)
sleep "${3:-5}"
perf record -F 499 --call-graph dwarf,16384 -p $R,$C -o $2 -- sleep "${4:-5}" > /dev/null 2>&1
echo "$R $C" > $2.pids
