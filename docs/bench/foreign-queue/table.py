"""Per build variant and link: goodput of each run (with queue loss and the
host's steal ticks for its invocation), the median share of the ceiling, and
where traces were kept, the RTT floor of the gain cycle over min RTT.
Usage: python3 table.py batch-1 [batch-2 ...]  (directories named
VARIANT-LINK-ROUND, each with wanbench's results.json, steal.txt and,
for some, client-trace.txt from RELAY_LOG=relay_transport::model=debug)."""
import collections
import glob
import json
import os
import re
import statistics
import sys

LINKS = {'500': '1 GiB, 100 ms / 0.5 % / 500 Mbit/s', '200': '256 MiB, 200 ms / 1 % / 200 Mbit/s',
         '1g': '1 GiB, 200 ms / 1 % / 200 Mbit/s', '20': '256 MiB, 20 ms / 0 % / 200 Mbit/s'}
runs = collections.defaultdict(list)
floors = collections.defaultdict(list)
for batch in sys.argv[1:]:
    for d in sorted(glob.glob(batch + '/*/')):
        variant, link, _ = os.path.basename(d.rstrip('/')).rsplit('-', 2)
        r = json.load(open(d + 'results.json'))[0]
        steal = open(d + 'steal.txt').read().strip().split('=')[-1]
        runs[(link, variant)].append((r['goodput_mbit'], r['goodput_mbit'] / r['link_ceiling_mbit'] * 100,
                                      r['queue_loss_pct'], steal))
        trace = d + 'client-trace.txt'
        if os.path.exists(trace):
            for line in open(trace):
                m = re.search(r'mode="gain.*min_rtt_ms="([0-9.]+)".*cycle_floor_ms="([0-9.]+)"', line)
                if m:
                    floors[(link, variant)].append(float(m.group(2)) - float(m.group(1)))
print('| Link | Variant | Runs: Mbit/s (queue loss %, steal ticks) | Median of ceiling | Cycle floor over min RTT, ms (median, 90th pct) |')
print('|---|---|---|---:|---|')
for (link, variant) in sorted(runs, key=lambda k: (list(LINKS).index(k[0]), k[1])):
    xs = runs[(link, variant)]
    med = statistics.median(x[1] for x in xs)
    f = sorted(floors.get((link, variant), []))
    fl = f'{f[len(f) // 2]:.1f}, {f[9 * len(f) // 10]:.1f}' if f else '–'
    cells = ', '.join(f'{g:.1f} ({q:.2f}, {s})' for g, _, q, s in xs)
    print(f'| {LINKS[link]} | {variant} | {cells} | {med:.1f} % | {fl} |')
