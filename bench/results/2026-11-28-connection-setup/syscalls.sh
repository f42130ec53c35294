#!/bin/bash
# syscalls.sh NAME PORT PATH -- cmd...: as ticks.sh, with `perf stat -e 'syscalls:sys_enter_*'`
# on the server for 4 s of the run; prints system calls per request (0.01 and more).
NAME=$1; PORT=$2; URLP=$3; shift 4
taskset -c 0 "$@" > "/tmp/syscalls-$NAME.log" 2>&1 &
P=$!
for i in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$PORT$URLP" && break; sleep 0.1; done
taskset -c 1 wrk -t1 -c50 -d1s -H "Connection: close" "http://127.0.0.1:$PORT$URLP" > /dev/null
perf stat -e 'syscalls:sys_enter_*' -p $P -o "/tmp/syscalls-$NAME.perf" -- sleep 4 &
S=$!
OUT=$(taskset -c 1 wrk -t1 -c50 -d4s -H "Connection: close" "http://127.0.0.1:$PORT$URLP")
wait $S
N=$(echo "$OUT" | awk '/requests in/ {print $1}')
kill $P; wait $P 2>/dev/null
echo "$NAME: $N requests; per request:"
grep syscalls: "/tmp/syscalls-$NAME.perf" | awk -v n="$N" '{gsub(",","",$1); if ($1/n >= 0.01) printf "  %-28s %.2f\n", $2, $1/n}' | sed 's/syscalls:sys_enter_//' | sort -k2 -nr
