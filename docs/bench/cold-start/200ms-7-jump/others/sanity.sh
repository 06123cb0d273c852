#!/bin/bash
# sanity.sh TAG: head vs jump, cold, on the other lossy profiles and small files
TAG=$1
for i in 1 2; do for b in head jump; do
  D=/work/cpu-bins/$b
  for spec in "200/0.01/200 200x256KiB" "100/0.005/500 1x512MiB" "200/0.05/100 1x256MiB" "100/0.01/200 1x256MiB"; do
    set -- $spec
    echo "$b $1 $2 load $(cut -d' ' -f1 /proc/loadavg)"
    $D/wanbench --bin-dir $D --profiles $1 --methods relay-cold --workloads $2 --repeats 1 --cap-seconds 120 --work-dir /tmp/cs/ws-$b --out /tmp/cs/$TAG-$b-$i-${1//\//_}-$2 2>&1 | grep "#1"
  done
done; done
