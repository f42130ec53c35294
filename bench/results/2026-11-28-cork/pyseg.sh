#!/bin/bash
# pyseg.sh LABEL  (env passed to pysf.py)
taskset -c 0 python3 "$(dirname "$0")"/pysf.py & pid=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18195/x && break; sleep 0.1; done
taskset -c 1 /work/main/target/release/ramjet bench -t1 -c4 -d5s --discard-body http://127.0.0.1:18195/100m.bin > /tmp/seg/pyout 2>&1 &
sleep 1.5; nstat -n >/dev/null; t0=$(awk '{print $14+$15}' /proc/$pid/stat); sleep 3; nstat > /tmp/seg/pynstat; t1=$(awk '{print $14+$15}' /proc/$pid/stat)
wait %2 2>/dev/null; while pgrep -f "bench -t1 -c4 -d5s" >/dev/null; do sleep 0.2; done; kill $pid; wait $pid 2>/dev/null
rps=$(grep -i "requests/sec" /tmp/seg/pyout | awk '{print $2}')
python3 -c "
ns={l.split()[0]:int(l.split()[1]) for l in open('/tmp/seg/pynstat') if l[0]!='#'}
n=$rps*3; print('$1', 'rps', $rps, 'data segs/resp', round(ns.get('TcpExtTCPOrigDataSent',0)/n), 'all segs/resp', round(ns.get('TcpOutSegs',0)/n), 'server ticks/resp', round(($t1-$t0)/n,2))"
