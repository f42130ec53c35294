# summary.py TAG...: per server (the TAG's part before the first "-"), the median over its runs
# of wrk's req/s and p99, of the longest response analyze.py finds (first ones included) and of
# the share of bytes wrk read in runs of a whole body, from /tmp/wrk-TAG.txt and
# /tmp/wrk-runs-TAG.txt (run.sh's outputs). The head's length (analyze.py cuts responses with it)
# is 242 bytes for ramjet; for a peer, /tmp/wrk-head-SERVER.txt holds it
# (`curl -s -D - -o /dev/null URL | wc -c`).
import collections, re, statistics, subprocess, sys
heads = {"ramjet": 242, "corked": 242}
rows = collections.defaultdict(list)
for tag in sys.argv[1:]:
    srv = tag.split("-")[0]
    w = open(f"/tmp/wrk-{tag}.txt").read()
    n, secs = re.search(r"(\d+) requests in ([\d.]+)s", w).groups()
    p99 = re.search(r"99%\s+([\d.]+)(ms|s)", w)
    p99 = float(p99[1]) * (1000 if p99[2] == "s" else 1)
    head = heads.get(srv) or int(open(f"/tmp/wrk-head-{srv}.txt").read())
    a = subprocess.run([sys.executable, __file__.replace("summary.py", "analyze.py"), f"/tmp/wrk-runs-{tag}.txt", str(head)],
                       capture_output=True, text=True).stdout
    longest = float(re.search(r"response gaps ms:.*max ([\d.]+)", a)[1])
    whole = float(re.search(r"runs of a whole body: (\d+)%", a)[1])
    rows[srv].append((int(n) / float(secs), p99, longest, whole))
for srv, v in rows.items():
    med = lambda i: statistics.median(x[i] for x in v)
    print(f"{srv} ({len(v)} runs): req/s {[round(x[0], 1) for x in v]} median {med(0):.1f}")
    print(f"   wrk p99 ms {[round(x[1]) for x in v]} median {med(1):.0f}")
    print(f"   longest response ms {[round(x[2]) for x in v]} median {med(2):.0f}")
    print(f"   share of bytes read in runs of a whole body % {[round(x[3]) for x in v]} median {med(3):.0f}")
