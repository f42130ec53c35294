#!/bin/bash
# env passed through; count HRTIMER softirqs on CPU0 during 4s
taskset -c 0 ${XP_BIN:?the build with xp-adaptive.patch} serve --config $(dirname "$0")/ramjet.toml >/tmp/xp-server.log 2>&1 & pid=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18190/100.bin && break; sleep 0.1; done
h0=$(awk '/HRTIMER/{print $2}' /proc/softirqs)
taskset -c 1 ${CLIENT:-ramjet} bench -t1 -c4 -d4s --discard-body http://127.0.0.1:18190/100m.bin 2>&1 | grep Requests
h1=$(awk '/HRTIMER/{print $2}' /proc/softirqs)
echo "hrtimer softirqs cpu0: $((h1-h0))"
kill $pid; wait $pid 2>/dev/null
