"""Cold 256 MiB runs from process start to exit: per build, each run's wall and
client-clock seconds and its share of the link ceiling by wall time, then the
medians. Usage: python3 walltab.py PREFIX (run dirs PREFIX-BUILD-N, each with
wanbench's results.json), e.g. python3 walltab.py 200ms-5-close/c1."""
import json,sys,glob,statistics
rows={}
for d in sorted(glob.glob(sys.argv[1]+'-*')):
    b=d[len(sys.argv[1])+1:].rsplit('-',1)[0]
    p=d+'/results.json'
    try: r=json.load(open(p))[0]
    except Exception: continue
    ceil=r['link_ceiling_mbit']; bits=r['bytes']*8/1e6
    pct=100*bits/r['wall_seconds']/ceil
    rows.setdefault(b,[]).append((r['wall_seconds'],r['seconds'],pct,r['verified'],r.get('loadavg_1m')))
for b,v in rows.items():
    print(b, ' '.join('%.2f/%.2f(%.1f%%)'%(w,s,p) for w,s,p,_,_ in v), '| median wall %.3f s, %.1f %%'%(statistics.median([x[0] for x in v]), statistics.median([x[2] for x in v])), 'verified', all(x[3] for x in v))
