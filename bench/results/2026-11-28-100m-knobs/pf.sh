#!/bin/bash
# perf profile of the server over 4 s of 100 MB x4 discarding: pf.sh ramjet|nginx [ramjet build]
source "$(dirname "$0")/serve.sh"
(taskset -c 1 $bin bench -t1 -c4 -d7s --discard-body http://127.0.0.1:$port/100m.bin > /tmp/pf-bench.out 2>&1 &)
sleep 2
perf record -F 2999 -g -p $pid -o /tmp/pf-$which.data -- sleep 4 >/dev/null 2>&1
sleep 1.5; grep Requests /tmp/pf-bench.out; kill $pid; sleep 0.5
