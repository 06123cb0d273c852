"""Cold start against plain slow start and warm start, from the client's and
the relay's clocks (what the packet train measured in the last column).
Usage: python3 table.py DIR (DIR holds wanbench's results.json and the
relay-client JSON reports of each run, as in 200ms/ and 500mbit/)."""
import json, glob, sys
d = sys.argv[1]
res = json.load(open(d + '/results.json'))
rows = res['rows'] if isinstance(res, dict) else res
START = {'relay-cold-plain': 'cold, plain slow start', 'relay-cold': 'cold, train', 'relay': 'warm'}
print("| File | Start | # | Client s | Relay receiving ms | Ideal ms | Shortfall ms | Goodput Mbit/s | of ceiling | Queue loss | Train measured Mbit/s |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in sorted(rows, key=lambda r: (r['workload'], list(START).index(r['method']), r['repeat'])):
    m, rep = r['method'], r['repeat']
    c = json.load(open(glob.glob(f"{d}/{m}-{r['workload']}-r{rep}.json")[0]))
    x = c['files'][0]; rl = x['relay_ms']
    ceil = r['link_ceiling_mbit']
    ideal = x['bytes'] * 8 / (ceil * 1e6) * 1000
    train = c.get('quic', {}).get('train_mbit')
    print(f"| {r['workload']} | {START[m]} | {rep} | {c['totals']['seconds']:.2f} | {rl['receive_ms']} | {ideal:.0f} | {rl['receive_ms'] - ideal:.0f} | {r['goodput_mbit']:.1f} | {r['goodput_mbit'] / ceil * 100:.1f} % | {r['queue_loss_pct']:.2f} % | {'%.0f' % train if train else '–'} |")
