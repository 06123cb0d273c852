"""Fixed costs of one upload from the client's and the relay's clocks.
Usage: python3 table.py DIR (DIR holds wanbench's results.json and the
relay-client JSON reports of each run)."""
import json, glob, sys
d = sys.argv[1]
res = json.load(open(d + '/results.json'))
rows = res['rows'] if isinstance(res, dict) else res
print("| Run | Start | Client s (start to Receipt) | Before Offer ms | Relay receiving ms (Start to last byte) | Ideal ms (bytes at the ceiling) | Shortfall ms | Relay last byte to Receipt ms (stage wait + commit) | Client's last write to Receipt ms | Goodput Mbit/s | of ceiling |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    m, rep = r['method'], r['repeat']
    c = json.load(open(glob.glob(f"{d}/{m}-{r['workload']}-r{rep}.json")[0]))
    x = c['files'][0]; t = x['clocks_ms']; rl = x['relay_ms']
    ceil = r['link_ceiling_mbit']
    ideal = x['bytes'] * 8 / (ceil * 1e6) * 1000
    before = c['totals']['seconds'] * 1000 - t['transfer_ms'] - t['commit_ms']
    start = 'warm' if c.get('warm_start') else 'cold'
    tail = rl['stage_wait_ms'] + rl['commit_ms']
    print(f"| {m} #{rep} | {start} | {c['totals']['seconds']:.2f} | {before:.0f} | {rl['receive_ms']} | {ideal:.0f} | {rl['receive_ms'] - ideal:.0f} | {tail} ({rl['stage_wait_ms']} + {rl['commit_ms']}) | {t['commit_ms']} | {r['goodput_mbit']:.1f} | {r['goodput_mbit'] / ceil * 100:.1f} % |")
