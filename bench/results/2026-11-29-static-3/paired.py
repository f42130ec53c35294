import json,statistics,sys
d=json.load(open(sys.argv[1]))['runs']
for row,by in d.items():
    r=by[sys.argv[2] if len(sys.argv) > 2 else 'wrk']
    out=[]
    for peer in r:
        if peer=='ramjet' or peer=='minhttpd': continue
        for key in ('rps','rps_per_cpu_s'):
            rat=[a[key]/b[key] for a,b in zip(r['ramjet'],r[peer])]
            out.append((peer,key,statistics.median(rat)))
    worst_rps=min((x for x in out if x[1]=='rps'),key=lambda x:x[2])
    worst_cpu=min((x for x in out if x[1]=='rps_per_cpu_s'),key=lambda x:x[2])
    print(f"{row:32s} req/s {worst_rps[2]:.2f}x {worst_rps[0]:9s} per-CPU {worst_cpu[2]:.2f}x {worst_cpu[0]}")
