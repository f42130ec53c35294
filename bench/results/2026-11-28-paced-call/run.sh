#!/bin/bash
# usage: run.sh ramjet|nginx [bin] ; prints req/s and server CPU
which=$1; bin=${2:-/work/main/target/release/ramjet}
mkdir -p /tmp/xp-nginx
if [ $which = ramjet ]; then taskset -c 0 $bin serve --config $(dirname "$0")/ramjet.toml >/tmp/xp-server.log 2>&1 & port=18190
else taskset -c 0 nginx -c $(dirname "$0")/nginx.conf -e /tmp/xp-nginx-error.log & port=18191; fi
pid=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$port/100.bin && break; sleep 0.1; done
taskset -c 1 ${CLIENT:-ramjet} bench -t1 -c4 -d2s --discard-body http://127.0.0.1:$port/100m.bin >/dev/null 2>&1
s0=$(awk '{print $14+$15}' /proc/$pid/stat)
taskset -c 1 ${CLIENT:-ramjet} bench -t1 -c4 -d${DUR:-6}s --discard-body http://127.0.0.1:$port/100m.bin 2>&1 | grep -i "req/s\|requests" | head -3
s1=$(awk '{print $14+$15}' /proc/$pid/stat)
echo "server ticks $((s1-s0))"
kill $pid; wait $pid 2>/dev/null
