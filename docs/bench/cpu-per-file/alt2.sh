#!/bin/bash
# alt.sh TAG A B N [wanbench args]: N rounds of A then B
T=$1; A=$2; B=$3; N=$4; shift 4
for i in $(seq 1 $N); do
  for b in $A $B; do ${RUN:-./run.sh} $b $T-$b-$i "$@"; done
done
