#!/bin/bash
# BIN=build-of-experiment.patch timers.sh ENV=V: tcp_pace_kick hrtimers on CPU 0 per 100 MB response
# (4 discarding clients, ramjet bench on CPU 1); needs /tmp/srv/ramjet/ramjet.toml (startsrv.py).
env "$@" taskset -c 0 ${BIN:-/tmp/ramjet-env3} serve --config /tmp/srv/ramjet/ramjet.toml > /dev/null 2>&1 &
mp=$!; for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18080/4k.bin && break; sleep 0.1; done
/work/main/target/release/ramjet bench --cpus 1 -t1 -c4 -d6s --discard-body http://127.0.0.1:18080/100m.bin > /tmp/tb.txt 2>&1 &
sleep 1.5
perf record -q -e timer:hrtimer_start -C 0 -o /tmp/timers.data -- sleep 3 2>/dev/null
wait %2
kill $mp; wait $mp 2>/dev/null
n=$(perf script -i /tmp/timers.data 2>/dev/null | grep -c tcp_pace_kick)
r=$(grep -i "requests/sec" /tmp/tb.txt | awk '{print $2}')
echo "$* req/s=$r pace_kick_in_3s=$n per_response=$(python3 -c "print(round($n/($r*3),1))")"
