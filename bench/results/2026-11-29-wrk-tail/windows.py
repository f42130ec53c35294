# windows.py RUNS SS HEADLEN: for the 3 slowest responses analyze.py finds, each server
# connection's send window (snd_wnd, the receive window wrk's socket offers), unsent bytes and
# MB/s acknowledged, and the share of its busy time `ss` counts as limited by the receive window
# (`rwnd_limited`), sampled by ss_sample.py while the response was in flight.
import collections, re, subprocess, sys, statistics
lines = open(sys.argv[1]).read().splitlines()
port_of = {int(l.split()[2]): int(l.split()[4]) for l in lines if l.startswith("#")}
out = subprocess.run([sys.executable, __file__.replace("windows.py", "analyze.py"), sys.argv[1], sys.argv[3]],
                     capture_output=True, text=True).stdout
slow = re.findall(r"slow response fd (\d+) \(port \d+\): (\d+) ms, (\d+)-(\d+) ms into the run", out)
t_first = min(int(l.split()[1]) for l in lines if not l.startswith("#"))
samples = collections.defaultdict(list)  # peer port -> (t, snd_wnd, notsent, bytes_acked)
t = peer = None
for l in open(sys.argv[2]):
    if l.startswith("T "):
        t = int(l.split()[1]); continue

    m = re.search(r"127\.0\.0\.1:\d+\s+127\.0\.0\.1:(\d+)", l)
    if m:
        peer = int(m.group(1)); continue
    if peer and "bytes_acked" in l:
        g = lambda k: int((re.search(r"\b" + k + r":(\d+)", l) or [0, "0"])[1])
        samples[peer].append((t, g("snd_wnd"), g("notsent"), g("bytes_acked"), g("busy"), g("rwnd_limited")))
        peer = None
print(out, end="")
for fd, ms, a, e in slow:
    a, e = t_first + int(a) * 1000000, t_first + int(e) * 1000000
    print(f"while fd {fd} (port {port_of[int(fd)]}) waited {ms} ms:")
    for p, ss in sorted(samples.items()):
        inside = [s for s in ss if a <= s[0] <= e]
        if len(inside) < 2:
            continue
        rate = (inside[-1][3] - inside[0][3]) / ((inside[-1][0] - inside[0][0]) / 1e9) / 1e6
        who = "the waiting one" if p == port_of[int(fd)] else ""
        busy = inside[-1][4] - inside[0][4]
        limited = f"{(inside[-1][5] - inside[0][5]) / busy:.0%} of its busy time limited by the window, " if busy else ""
        print(f"   port {p}: snd_wnd median {statistics.median(s[1] for s in inside) / 1024:.0f} KiB, "
              f"unsent median {statistics.median(s[2] for s in inside) / 1024:.0f} KiB, "
              f"{limited}{rate:.0f} MB/s acknowledged ({len(inside)} samples) {who}")
