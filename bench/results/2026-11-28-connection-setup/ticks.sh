#!/bin/bash
# ticks.sh NAME PORT PATH -- cmd...: the server on CPU 0, `wrk -t1 -c50 -H "Connection: close"`
# on CPU 1 for 5 s (after 1 s of warm-up); prints the server's user and system ticks per
# 1,000 requests and its requests per CPU-second. conf.sh writes the configurations, e.g.
#   ./ticks.sh ramjet 18080 /4k.bin -- ramjet serve --config /tmp/nk/c/ramjet.toml
#   ./ticks.sh h2o 18083 /4k.bin -- h2o -c /tmp/nk/c/h2o.conf
NAME=$1; PORT=$2; URLP=$3; shift 4
taskset -c 0 "$@" > "/tmp/ticks-$NAME.log" 2>&1 &
P=$!
for i in $(seq 1 50); do curl -s -o /dev/null "http://127.0.0.1:$PORT$URLP" && break; sleep 0.1; done
taskset -c 1 wrk -t1 -c50 -d1s -H "Connection: close" "http://127.0.0.1:$PORT$URLP" > /dev/null
read -r U1 S1 < <(awk '{print $14, $15}' /proc/$P/stat)
OUT=$(taskset -c 1 wrk -t1 -c50 -d5s -H "Connection: close" "http://127.0.0.1:$PORT$URLP")
read -r U2 S2 < <(awk '{print $14, $15}' /proc/$P/stat)
N=$(echo "$OUT" | awk '/requests in/ {print $1}')
kill $P; wait $P 2>/dev/null
awk -v n="$N" -v u=$((U2-U1)) -v s=$((S2-S1)) -v name="$NAME" 'BEGIN {printf "%-8s req %d  user %.2f sys %.2f ticks per 1000, %.0f req per CPU-s\n", name, n, u*1000/n, s*1000/n, n/((u+s)/100)}'
