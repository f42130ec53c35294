#!/bin/bash
# context switches of client and server, and IPIs, over 3 s of 100 MB x4 discarding: cs.sh ramjet|nginx [ramjet build]
source "$(dirname "$0")/serve.sh"
taskset -c 1 $bin bench -t1 -c4 -d5s --discard-body http://127.0.0.1:$port/100m.bin > /tmp/cs-bench.out 2>&1 & cpid=$!
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
