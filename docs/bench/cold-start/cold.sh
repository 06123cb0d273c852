#!/bin/bash
# cold.sh TAG N A B...: alternates builds, one cold 256 MiB run at 200 ms / 1 % / 200 Mbit/s each per round
TAG=$1; N=$2; shift 2
cd /work/main
for i in $(seq 1 $N); do for b in "$@"; do
  D=/work/cpu-bins/$b
  echo "load $(cut -d' ' -f1 /proc/loadavg)"
  $D/wanbench --bin-dir $D --profiles 200/0.01/200 --methods relay-cold --workloads 1x256MiB --repeats 1 --cap-seconds 120 --work-dir /tmp/cpu/wc-$b --out /tmp/cpu/$TAG-$b-$i 2>&1 | grep "#1"
done; done
