#!/bin/bash
D=/work/main/bench/results/2026-11-28-paced-call
which=$1; bin=${2:-${RAMJET:?a ramjet build}}
if [ $which = ramjet ]; then taskset -c 0 $bin serve --config $D/ramjet.toml >/tmp/xp-server.log 2>&1 & port=18190
else mkdir -p /tmp/xp-nginx; taskset -c 0 nginx -c $D/nginx.conf -e /tmp/xp-nginx-error.log & port=18191; fi
pid=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$port/100.bin && break; sleep 0.1; done
(taskset -c 1 ${RAMJET:?a ramjet build} bench -t1 -c4 -d7s --discard-body http://127.0.0.1:$port/100m.bin > /tmp/pf-bench.out 2>&1 &)
sleep 2
perf record -F 2999 -g -p $pid -o /tmp/pf-$which.data -- sleep 4 >/dev/null 2>&1
sleep 1.5; grep Requests /tmp/pf-bench.out; kill $pid; sleep 0.5
