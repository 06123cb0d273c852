#!/bin/bash
set -u
B=/tmp/wb-bin; OUT=/tmp/maxrate-after; mkdir -p $OUT
run() { name=$1; shift; echo "== $name"; $B/wanbench --bin-dir $B "$@" --methods relay --repeats 1 --cap-seconds 90 --out $OUT/$name --work-dir $OUT/$name-work > $OUT/$name.log 2>&1; echo rc=$?; }
for path in loopback 20 200; do
  for cap in 1 10 100 500 1000; do
    mib=$(( cap * 3 / 2 )); [ $mib -lt 2 ] && mib=2
    if [ $path = loopback ]; then prof=(--loopback --profiles 0/0/1000); else prof=(--profiles $path/0/1200); fi
    run $path-$cap "${prof[@]}" --workloads 1x${mib}MiB --client-arg=--max-rate --client-arg=$cap
  done
done
