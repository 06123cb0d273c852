#!/bin/bash
set -u
# Run in an empty scratch folder (it makes 200,000 files there):
#   REPO=/path/to/checkout B=$REPO/target/debug bash $REPO/docs/bench/sync/flat-200k/run.sh
B=${B:?the folder holding relay-client and standin-storage}
KEY=$(grep -A1 'pub const DEV_KEY' "${REPO:?the checkout}/tests/src/lib.rs" | tail -1 | tr -d ' ";')
PORT=47123
$B/standin-storage --listen 127.0.0.1:$PORT > standin.log 2>&1 &
SP=$!
echo "standin $SP"
if [ ! -d flat ]; then
  mkdir flat && cd flat && python3 -c "
import os
for i in range(200000):
    with open('f%07d.bin'%i,'wb') as f: f.write(b'x')
" && cd ..
fi
sleep 1
URL=http://127.0.0.1:$PORT/devstoreaccount1
echo x > one.txt
$B/relay-client upload one.txt --to bench/one --direct --storage-url $URL --account-key "$KEY" --create-container > up.log 2>&1; echo "upload exit=$?"
for w in 100000000 default 10000 1000 100000000 default 10000 1000; do
  rm -f idx-*.sqlite*
  if [ $w = default ]; then E=""; else E="RELAY_SYNC_SORT_WIDTH=$w"; fi
  env $E /usr/bin/time -v nice $B/relay-client sync flat/ bench/flat --direct --storage-url $URL --account-key "$KEY" --index idx-$w.sqlite --dry-run > out-$w.txt 2> err-$w.txt
  echo "width=$w exit=$? $(grep -E 'Maximum resident|Elapsed' err-$w.txt | tr '\n' ' ')"
done
kill $SP
