#!/bin/bash
# prof.sh ramjet|minhttpd: the same load for 5 s; `perf record -g -C 0` for 3 s of it; the top symbols
# of CPU 0 (idle shows as pv_native_safe_halt).
name=$1
SRV=$name python3 $(dirname "$0")/../2026-11-29-uncorked/startsrv.py > /dev/null &
sleep 1.5
pid=$(pgrep -f "^$( [ $name = ramjet ] && echo "/work/main/target/release/ramjet serve" || echo /tmp/ramjet-bench/minhttpd)" | head -1)
port=$(python3 -c "import sys; sys.path.insert(0,'/work/main/bench'); sys.argv=['x']; import compare; print(compare.PORTS['$name'])")
(taskset -c 1 wrk -t1 -c50 -d5s -s /tmp/ramjet-bench/pipeline.lua http://127.0.0.1:$port/4k.bin | grep "requests in" > /tmp/prof-$name.req) &
sleep 1
perf record -q -g -C 0 -o /tmp/prof-$name.data -- sleep 3 2>/dev/null
sleep 1.5
kill $pid
cat /tmp/prof-$name.req
perf report -i /tmp/prof-$name.data --no-children --sort sym -q 2>/dev/null | grep -v "^$" | grep "%" | head -40
