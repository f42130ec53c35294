#!/bin/bash
# mid.sh FILE LABEL: data segments and server ticks per response, c50, one worker
export RAMJET=${RAMJET:?a ramjet build that reads XP_CORK_MIN}
source "$(dirname "$0")"/../2026-11-28-100m-knobs/serve.sh ramjet
taskset -c 1 $RAMJET bench -t1 -c50 -d5s http://127.0.0.1:$port/$1 > /tmp/mout 2>&1 &
sleep 1.5; nstat -n >/dev/null; t0=$(awk '{print $14+$15}' /proc/$pid/stat); sleep 3; nstat > /tmp/mnstat; t1=$(awk '{print $14+$15}' /proc/$pid/stat)
while pgrep -f "bench -t1 -c50 -d5s" >/dev/null; do sleep 0.2; done; kill $pid; wait $pid 2>/dev/null
rps=$(grep -i "requests/sec" /tmp/mout | awk '{print $2}')
python3 -c "
ns={l.split()[0]:int(l.split()[1]) for l in open('/tmp/mnstat') if l[0]!='#'}
n=$rps*3; print('$1 $2', 'rps', $rps, 'data segs/resp', round(ns.get('TcpExtTCPOrigDataSent',0)/n,2), 'all segs/resp', round(ns.get('TcpOutSegs',0)/n,2), 'server us/resp', round(($t1-$t0)*10000/n,2))"
