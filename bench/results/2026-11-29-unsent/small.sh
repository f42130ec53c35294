#!/bin/bash
BIN=$1; path=${2:-/4k.bin}
taskset -c 0 $BIN serve --config /tmp/x/ramjet.toml >/tmp/x/srv.log 2>&1 & pid=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18080/4k.bin && break; sleep 0.1; done
taskset -c 1 wrk -t1 -c50 -d1s http://127.0.0.1:18080$path >/dev/null
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
r=$(taskset -c 1 wrk -t1 -c50 -d4s http://127.0.0.1:18080$path | awk '/Requests\/sec/{print $2}')
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
echo "$(basename $BIN) $path rps=$r cpu=$((t1-t0))"
kill $pid; wait $pid 2>/dev/null
