#!/bin/bash
# split.sh NAME PORT -- cmd...: run the server on CPU 0, pipelined wrk on CPU 1 for 5 s, print req/s and user/sys
# e.g. split.sh minhttpd 18085 -- /tmp/ramjet-bench/minhttpd -p 18085 -c 0 -s 4096 -a 127.0.0.1
#      split.sh ramjet 18080 -- target/release/ramjet serve --config bench/results/2026-11-28-static/split-ramjet.toml
# (bench/compare.py makes /tmp/ramjet-bench: the files, pipeline.lua and minhttpd)
NAME=$1; PORT=$2; shift 3
taskset -c 0 "$@" > /tmp/split-$NAME.log 2>&1 &
P=$!
for i in $(seq 1 50); do curl -s -o /dev/null http://127.0.0.1:$PORT/4k.bin && break; sleep 0.1; done
taskset -c 1 wrk -t1 -c50 -d1s -s /tmp/ramjet-bench/pipeline.lua http://127.0.0.1:$PORT/4k.bin > /dev/null
read -r U1 S1 < <(awk '{print $14, $15}' /proc/$P/stat)
R=$(taskset -c 1 wrk -t1 -c50 -d5s -s /tmp/ramjet-bench/pipeline.lua http://127.0.0.1:$PORT/4k.bin | awk '/Requests\/sec/ {print $2}')
read -r U2 S2 < <(awk '{print $14, $15}' /proc/$P/stat)
kill $P; wait $P 2>/dev/null
echo "$NAME req/s $R user $((U2-U1)) sys $((S2-S1)) ticks (5 s)"
