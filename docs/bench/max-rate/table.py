import json, glob, os, sys
rows=[]
for d in sorted(glob.glob(sys.argv[1]+'/*-work')):
    name=os.path.basename(d)[:-5]
    path,cap=name.rsplit('-',1); cap=float(cap)
    if not os.path.exists(f'{sys.argv[1]}/{name}/results.json'): continue
    res=json.load(open(f'{sys.argv[1]}/{name}/results.json'))
    rs=res['rows'] if isinstance(res,dict) else res
    r=rs[-1]  # the last run (w200: the warm second one)
    cj=sorted(glob.glob(f'{d}/logs-*/relay-*.json'))
    c=json.load(open(cj[-1]))
    f=c['files'][0]
    tms=f['clocks_ms']['transfer_ms']
    xfer=f['bytes']*8/(tms/1000)/1e6
    rows.append((path,cap,f['bytes']/2**20,r['goodput_mbit'],xfer,r['seconds'],r['verified'],r.get('queue_loss_pct')))
order={'loopback':0,'20':1,'200':2,'w200':3}
rows.sort(key=lambda x:(order[x[0]],x[1]))
print("| Path | --max-rate Mbit/s | File MiB | Transfer Mbit/s (Offer to last byte) | ratio | Goodput Mbit/s (to verified commit) | ratio | verified |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
for p,cap,mib,g,x,sec,v,q in rows:
    pl = 'loopback' if p=='loopback' else ('200 ms / 0 % / 1200 Mbit/s, warm (2nd run)' if p=='w200' else f'{p} ms / 0 % / 1200 Mbit/s')
    print(f"| {pl} | {cap:g} | {mib:.0f} | {x:.2f} | {x/cap:.3f} | {g:.2f} | {g/cap:.3f} | {v} |")
