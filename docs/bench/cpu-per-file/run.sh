#!/bin/bash
# run.sh BINDIR OUTNAME [extra wanbench args...]: 10,000-file loopback run; perf of both processes 8 s into each workload
B=/work/cpu-bins/$1; N=$2; shift 2
$B/wanbench --bin-dir $B --python /tmp/blob-relay-pyvenv/bin/python --loopback --profiles 0/0/1000 --workloads 10000x4KiB,10000x64KiB --methods relay --repeats 1 --cap-seconds 300 --work-dir /work/cpu-bins/work --out /work/cpu-bins/out/$N "$@" > /work/cpu-bins/out/$N.log 2>&1
