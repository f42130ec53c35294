#!/bin/bash
# usage: LOWAT=v run2.sh ramjet|h2o wrk|discard
name=$1; client=$2; BIN=${BIN:-/work/main/target/release/ramjet}; D=${D:-5}
[ -n "$LOWAT" ] && sysctl -qw net.ipv4.tcp_notsent_lowat=$LOWAT
if [ $name = ramjet ]; then taskset -c 0 $BIN serve --config /tmp/x/ramjet.toml >/tmp/x/srv.log 2>&1 & port=18080
else taskset -c 0 h2o -c /tmp/x/h2o.conf >/tmp/x/srv.log 2>&1 & port=18083; fi
pid=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$port/4k.bin && break; sleep 0.1; done
load() { if [ $client = wrk ]; then taskset -c 1 wrk -t1 -c4 -d$1 http://127.0.0.1:$port/100m.bin | awk '/Requests\/sec/{print $2}';
  else /work/main/target/release/ramjet bench --cpus 1 -t1 -c4 -d$1 --discard-body http://127.0.0.1:$port/100m.bin 2>&1 | grep -io "[0-9.]* req/s\|requests/s[^0-9]*[0-9.]*" | head -1; fi; }
load 1s >/dev/null
nstat -n
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
rps=$(load ${D}s)
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
ns=$(nstat TcpRetransSegs 2>/dev/null | awk 'NR>1{printf "%s=%s ",$1,$2}')
echo "$name $client lowat=${LOWAT:-default} rps=$rps cpu=$((t1-t0)) $ns"
pkill -f "h2o -c /tmp/x" ; kill $pid 2>/dev/null; wait $pid 2>/dev/null
sysctl -qw net.ipv4.tcp_notsent_lowat=4294967295
sleep 0.5
