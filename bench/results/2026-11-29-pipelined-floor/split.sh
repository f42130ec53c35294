#!/bin/bash
# split.sh ramjet|minhttpd: the server as bench/compare.py configures it (CPU 0), `wrk -t1 -c50` with 4
# pipelined requests (/tmp/ramjet-bench/pipeline.lua, which compare.py writes) on CPU 1, 3 rounds of
# 5 s; user and system ticks of the server per round, requests per CPU-second, µs per request.
# usage: split.sh NAME  -> start server like compare.py, run pipelined wrk, print user/sys ticks
name=$1
SRV=$name python3 $(dirname "$0")/../2026-11-29-uncorked/startsrv.py > /tmp/split-$name.pid &
sleep 1.5
pid=$(pgrep -f "^$( [ $name = ramjet ] && echo "/work/main/target/release/ramjet serve" || echo /tmp/ramjet-bench/minhttpd)" | head -1)
port=$(python3 -c "import sys; sys.path.insert(0,'/work/main/bench'); sys.argv=['x']; import compare; print(compare.PORTS['$name'])")
taskset -c 1 wrk -t1 -c50 -d2s -s /tmp/ramjet-bench/pipeline.lua http://127.0.0.1:$port/4k.bin >/dev/null
for r in 1 2 3; do
a=$(awk '{print $14, $15}' /proc/$pid/stat)
out=$(taskset -c 1 wrk -t1 -c50 -d5s -s /tmp/ramjet-bench/pipeline.lua http://127.0.0.1:$port/4k.bin)
b=$(awk '{print $14, $15}' /proc/$pid/stat)
req=$(echo "$out" | awk '/requests in/{print $1}')
echo "$name round $r: req=$req utime,stime before=$a after=$b" | awk -v req=$req '{split($0,x,"before="); split(x[2],y," "); u=y[3]-y[1]; s=substr(y[4],1)-y[2]; sub("after=","",y[3]); print $0, " user_ticks=" (y[3]-y[1]) " sys_ticks=" (y[4]-y[2]) " req/cpu-s=" int(req/((y[3]-y[1]+y[4]-y[2])/100)) " us_user/req=" (y[3]-y[1])*10000/req " us_sys/req=" (y[4]-y[2])*10000/req}'
done
kill $pid
