#!/bin/bash
# perfquick.sh BINNAME OUT: waits for relay-client of /work/cpu-bins/BINNAME, 1 s in samples relay+client 4 s
B=/work/cpu-bins/$1
for i in $(seq 1 1200); do C=$(pgrep -f "^$B/relay-client" | head -1); [ -n "$C" ] && break; sleep 0.2; done
R=$(pgrep -f "^$B/relay-server" | head -1)
sleep 1
perf record -F 499 --call-graph dwarf,16384 -p $R,$C -o $2 -- sleep 4 > /dev/null 2>&1
echo "$R $C" > $2.pids
