"""Medians of every round in compare.py's results.json files, per metric.

    python3 medians.py small.json rows.json

For each row: the median req/s and req per server CPU-second of each server over all rounds;
ramjet over the best peer (nginx, lighttpd or h2o) as a ratio of medians, and the median of
the in-round ratios (compare.py rotates the server order each round); the same against
minhttpd where it ran. compare.py's own report gives the round with the median req/s, whose
other columns are that round's.
"""
import json,statistics as st,sys
for f in sys.argv[1:]:
  d=json.load(open(f))
  for prof,v in d['runs'].items():
    per={n:rs for n,rs in v['wrk'].items() if rs}
    print("==",prof)
    for key in ('rps','rps_per_cpu_s'):
      med={n: st.median([r[key] for r in rs]) for n,rs in per.items()}
      peers=[n for n in per if n not in ('ramjet','minhttpd')]
      best=max(peers,key=lambda n: med[n])
      ratios=[a[key]/b[key] for a,b in zip(per['ramjet'],per[best])]
      line=f"  {key:14} medians: " + ", ".join(f"{n} {med[n]:,.0f}" for n in per)
      line+=f" | ramjet/{best} of medians {med['ramjet']/med[best]:.2f}, in-round median {st.median(ratios):.2f}"
      if 'minhttpd' in per:
          mr=[a[key]/b[key] for a,b in zip(per['ramjet'],per['minhttpd'])]
          line+=f" | ramjet/minhttpd {med['ramjet']/med['minhttpd']:.2f}, in-round {st.median(mr):.2f}"
      print(line)
