#!/bin/bash
# alt.sh TAG WORKLOADS N A B...: alternates builds, one run each per round.
# A build may carry the relay's block checksum, BUILD:crc64 (RELAY_BLOCK_CHECKSUM;
# default md5); its outputs are then /tmp/cpu/TAG-BUILD-crc64-i.
TAG=$1; WL=$2; N=$3; shift 3
for i in $(seq 1 $N); do for spec in "$@"; do
  b=${spec%%:*}; c=${spec#*:}; [ "$c" = "$spec" ] && c=md5 && name=$b || name=$b-$c
  D=/work/cpu-bins/$b
  RELAY_BLOCK_CHECKSUM=$c $D/wanbench --bin-dir $D --loopback --profiles 0/0/1000 --methods relay --storage standin --workloads $WL --repeats 1 --cap-seconds 300 --work-dir /tmp/cpu/w --out /tmp/cpu/$TAG-$name-$i 2>&1 | grep "#1"
done; done
