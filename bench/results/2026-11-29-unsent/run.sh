#!/bin/bash
# usage: run.sh ramjet|h2o [BIN]
name=$1; BIN=${2:-/work/main/target/release/ramjet}; D=${D:-5}
if [ $name = ramjet ]; then taskset -c 0 $BIN serve --config /tmp/x/ramjet.toml >/tmp/x/srv.log 2>&1 & port=18080
else taskset -c 0 h2o -c /tmp/x/h2o.conf >/tmp/x/srv.log 2>&1 & port=18083; fi
pid=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$port/4k.bin && break; sleep 0.1; done
taskset -c 1 wrk -t1 -c4 -d1s http://127.0.0.1:$port/100m.bin >/dev/null
nstat -n
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
out=$(taskset -c 1 wrk -t1 -c4 -d${D}s http://127.0.0.1:$port/100m.bin)
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
ns=$(nstat TcpRetransSegs TcpExtTCPDSACKRecv TcpExtTCPSpuriousRTOs TcpOutSegs TcpExtTCPLossProbes TcpExtTCPSACKReorder TcpExtTCPTSReorder 2>/dev/null | awk 'NR>1{printf "%s=%s ",$1,$2}')
rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
echo "$name rps=$rps cpu_ticks=$((t1-t0)) $ns"
pkill -f "h2o -c /tmp/x" ; kill $pid 2>/dev/null; wait $pid 2>/dev/null
sleep 0.5
