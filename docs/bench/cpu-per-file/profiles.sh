#!/bin/bash
# profiles.sh: the category tables of profiles.md from perf data files
# (each NAME.data with NAME.data.pids = "RELAY_PID CLIENT_PID", from perfboth.sh).
here=$(cd "$(dirname "$0")" && pwd)
for f in "$@"; do
  read -r R C < "$f.pids"
  perf script -i "$f" -F comm,pid,tid,ip,sym,dso 2>/dev/null > /tmp/profiles.$$.txt
  echo "### $(basename "$f" .data): relay-server"; echo
  python3 "$here/categorize.py" "$R" < /tmp/profiles.$$.txt; echo
  echo "### $(basename "$f" .data): relay-client"; echo
  python3 "$here/categorize.py" "$C" < /tmp/profiles.$$.txt; echo
done
rm -f /tmp/profiles.$$.txt
