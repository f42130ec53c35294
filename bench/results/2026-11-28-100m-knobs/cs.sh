#!/bin/bash
D=/work/main/bench/results/2026-11-28-paced-call
which=$1; bin=${2:-${RAMJET:?a ramjet build}}
if [ $which = ramjet ]; then taskset -c 0 $bin serve --config $D/ramjet.toml >/tmp/xp-server.log 2>&1 & port=18190
else mkdir -p /tmp/xp-nginx; taskset -c 0 nginx -c $D/nginx.conf -e /tmp/xp-nginx-error.log & port=18191; fi
pid=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$port/100.bin && break; sleep 0.1; done
taskset -c 1 ${RAMJET:?a ramjet build} bench -t1 -c4 -d5s --discard-body http://127.0.0.1:$port/100m.bin > /tmp/cs-bench.out 2>&1 & cpid=$!
sleep 1
c0=$(cat /proc/$cpid/task/*/status | awk '/^voluntary_ctxt/{v+=$2} /^nonvoluntary/{n+=$2} END{print v, n}')
s0=$(cat /proc/$pid/task/*/status | awk '/^voluntary_ctxt/{v+=$2} /^nonvoluntary/{n+=$2} END{print v, n}')
i0=$(awk '/CAL|RES/{print $2+$3}' /proc/interrupts | paste -sd+ | bc)
sleep 3
c1=$(cat /proc/$cpid/task/*/status | awk '/^voluntary_ctxt/{v+=$2} /^nonvoluntary/{n+=$2} END{print v, n}')
s1=$(cat /proc/$pid/task/*/status | awk '/^voluntary_ctxt/{v+=$2} /^nonvoluntary/{n+=$2} END{print v, n}')
i1=$(awk '/CAL|RES/{print $2+$3}' /proc/interrupts | paste -sd+ | bc)
wait $cpid; grep Requests /tmp/cs-bench.out
echo "$which client ctxsw (vol nonvol) $c0 -> $c1 ; server $s0 -> $s1 ; CAL+RES IPIs $((i1-i0))"
kill $pid; sleep 0.5
