# analyze.py RUNS HEADLEN: what shim.so recorded of one wrk run (one line per run of consecutive
# read() calls on one fd: fd, first and last read's CLOCK_MONOTONIC ns, bytes, reads).
# A response ends where an fd's byte count crosses a multiple of 100 MB + HEADLEN; the time
# between two ends on one fd is that response's latency as wrk measures it (wrk writes the next
# request as the previous response ends). For the 3 slowest: what the other fds read meanwhile,
# and the longest waits between this fd's own runs.
# The first response on each fd is timed from the run's first read, about when wrk connected.
import sys, collections
lines = open(sys.argv[1]).read().splitlines()
ports = {int(l.split()[2]): int(l.split()[4]) for l in lines if l.startswith('#')}
runs = [tuple(map(int, l.split())) for l in lines if not l.startswith('#')]
R = 104857600 + int(sys.argv[2])
cum = collections.defaultdict(int)
ends = collections.defaultdict(list)  # fd -> times a response finished
t_start = runs[0][1]
for fd, t0, t1, b, n in runs:
    before = cum[fd]; cum[fd] += b
    for k in range(before // R + 1, cum[fd] // R + 1):
        ends[fd].append(t1)
lat = []
for fd, es in ends.items():
    prev = t_start  # the first response: from the first read of the run (about when wrk connects)
    for e in es:
        if prev is not None: lat.append((e - prev, fd, prev, e))
        prev = e
lat.sort(reverse=True)
durs = sorted(((t1 - t0), b) for fd, t0, t1, b, n in runs)
print(f"responses timed {len(lat)}; runs {len(runs)}, MB/run median {durs[len(durs)//2][1]/1e6:.2f}")
print("run durations ms: p50 %.2f p99 %.2f max %.2f" % (durs[len(durs)//2][0]/1e6, durs[int(len(durs)*.99)][0]/1e6, durs[-1][0]/1e6))
whole = sum(b for d, b in durs if b >= R - 8192)
print(f"share of bytes read in runs of a whole body: {whole / sum(b for d, b in durs):.0%}")
print("longest runs (ms, MB):", [(round(d/1e6,1), round(b/1e6,1)) for d, b in durs[-5:]])
l = sorted(x[0] for x in lat)
print("response gaps ms: p50 %.1f p99 %.1f max %.1f" % (l[len(l)//2]/1e6, l[int(len(l)*.99)]/1e6, l[-1]/1e6))
for d, fd, a, e in lat[:3]:
    inside = [(f, round((t1-t0)/1e6,1), round(b/1e6,1)) for f, t0, t1, b, n in runs if t0 >= a and t1 <= e]
    mine = sum(b for f, t0, t1, b, n in runs if t0 >= a and t1 <= e and f == fd)
    others = collections.Counter()
    for f, _, b in inside:
        if f != fd: others[f] += b * 1e6
    print(f"slow response fd {fd} (port {ports.get(fd)}): {d/1e6:.0f} ms, {(a - t_start)/1e6:.0f}-{(e - t_start)/1e6:.0f} ms into the run; runs inside {len(inside)}; its own MB {mine/1e6:.0f}; other fds MB {dict((k, round(v/1e6)) for k,v in others.items())}")
    # the longest stretch with no read on fd
    ts = [t0 for f, t0, t1, b, n in runs if f == fd and t0 >= a and t1 <= e]
    gaps = sorted((ts[i+1]-ts[i] for i in range(len(ts)-1)), reverse=True)[:3]
    print("   longest waits between its own runs ms:", [round(g/1e6,1) for g in gaps])
    own = sorted(b for f, t0, t1, b, n in runs if t0 >= a and t1 <= e and f == fd)
    other = sorted(b for f, t0, t1, b, n in runs if t0 >= a and t1 <= e and f != fd)
    if own and other:
        print(f"   its runs: {len(own)}, median {own[len(own)//2]/1e3:.0f} KB; the other fds' runs: {len(other)}, "
              f"median {other[len(other)//2]/1e3:.0f} KB, largest {other[-1]/1e6:.0f} MB")
