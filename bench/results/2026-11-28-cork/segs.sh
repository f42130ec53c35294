#!/bin/bash
# Segments, softirqs, context switches and the server's CPU per response, 100 MB x4 to
# discarding clients: RAMJET=<a ramjet build> LABEL=<name> segs.sh ramjet|nginx
K=$(cd "$(dirname "$0")/../2026-11-28-100m-knobs" && pwd)
mkdir -p /tmp/seg
source $K/serve.sh "$1"
bin=${RAMJET}
taskset -c 1 $bin bench -t1 -c4 -d6s --discard-body http://127.0.0.1:$port/100m.bin > /tmp/seg/out 2>&1 &
sleep 1.5
nstat -n >/dev/null
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
grep -E "NET_RX|NET_TX|TIMER|HRTIMER|SCHED" /proc/softirqs > /tmp/seg/sirq0
grep -E "^(ctxt|intr)" /proc/stat > /tmp/seg/st0
sleep 3
nstat > /tmp/seg/nstat
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
grep -E "NET_RX|NET_TX|TIMER|HRTIMER|SCHED" /proc/softirqs > /tmp/seg/sirq1
grep -E "^(ctxt|intr)" /proc/stat > /tmp/seg/st1
while pgrep -f "bench -t1 -c4 -d6s" >/dev/null; do sleep 0.2; done; kill $pid; wait $pid 2>/dev/null
rps=$(grep -i "requests/sec" /tmp/seg/out | awk '{print $2}')
python3 - "$LABEL" "$rps" "$((t1-t0))" <<'PY'
import sys
which, rps = sys.argv[1], float(sys.argv[2]); n = rps*3
ns = {l.split()[0]: int(l.split()[1]) for l in open('/tmp/seg/nstat') if l[0] != '#' and len(l.split())>1}
def sirq(f): return {l.split()[0]: [int(x) for x in l.split()[1:3]] for l in open(f)}
a, b = sirq('/tmp/seg/sirq0'), sirq('/tmp/seg/sirq1')
st = lambda f: {l.split()[0]: int(l.split()[1]) for l in open(f)}
s0, s1 = st('/tmp/seg/st0'), st('/tmp/seg/st1')
out = f"{which} rps {rps:6.2f} | per resp: data {ns.get('TcpExtTCPOrigDataSent',0)/n:6.0f} OutSegs {ns.get('TcpOutSegs',0)/n:6.0f} InSegs {ns.get('TcpInSegs',0)/n:7.1f}"
out += f" DelayedACK {ns.get('TcpExtDelayedACKs',0)/n:5.1f} QuickAck {ns.get('TcpExtTCPQuickAck',0)/n if 'TcpExtTCPQuickAck' in ns else 0:5.1f}"
for k in ['NET_RX:', 'TIMER:', 'HRTIMER:', 'SCHED:']:
    out += f" {k[:-1]} " + "/".join(f"{(b[k][i]-a[k][i])/n:.0f}" for i in range(2))
out += f" srvticks/resp {int(sys.argv[3])/n:.2f}"
out += f" ctxt {(s1['ctxt']-s0['ctxt'])/n:.0f}"
print(out)
for k, v in []:
    if v/n > 5: print("   ", k, round(v/n, 1))
PY
