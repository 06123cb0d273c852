#!/bin/bash
# perfboth.sh BINDIR OUT: waits for relay-client of BINDIR, then 5 s in, samples relay and client for 5 s
B=/work/cpu-bins/$1
for i in $(seq 1 1200); do C=$(pgrep -f "^$B/relay-client" | head -1); [ -n "$C" ] && break; sleep 0.5; done
R=$(pgrep -f "^$B/relay-server" | head -1)
sleep 5
perf record -F 499 --call-graph dwarf,16384 -p $R,$C -o $2 -- sleep 5 > /dev/null 2>&1
echo "$R $C" > $2.pids
