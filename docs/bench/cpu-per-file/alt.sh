#!/bin/bash
# alt.sh TAG WORKLOADS N A B...: alternates builds, one run each per round
TAG=$1; WL=$2; N=$3; shift 3
for i in $(seq 1 $N); do for b in "$@"; do
  D=/work/cpu-bins/$b
  $D/wanbench --bin-dir $D --loopback --profiles 0/0/1000 --methods relay --storage standin --workloads $WL --repeats 1 --cap-seconds 300 --work-dir /tmp/cpu/w --out /tmp/cpu/$TAG-$b-$i 2>&1 | grep "#1" 
done; done
