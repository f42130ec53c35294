#!/bin/bash
# fair.sh BIN...: per round (ROUNDS, default 3), each ramjet build in turn (as bench/compare.py
# configures it, on CPU 0): one discarding client downloads the 2 GiB file over and over (hot after
# the first) while `wrk -t1 -c50` asks for 4 KB; both clients on CPU 1. Prints wrk's req/s, p50
# and p99 and the download's responses: what a fast reader costs the other connections.
D=$(cd "$(dirname "$0")" && pwd)
for r in $(seq 1 "${ROUNDS:-3}"); do
  for bin in "$@"; do
    (SRV=ramjet BIN=$bin setsid python3 "$D/../2026-11-29-wrk-tail/startsrv.py" > /dev/null 2>&1 &)
    for i in $(seq 1 100); do curl -s -o /dev/null http://127.0.0.1:18080/4k.bin && break; sleep 0.1; done
    curl -s -o /dev/null http://127.0.0.1:18080/cold/big2g.bin   # hot from here on
    taskset -c 1 "$bin" bench -c1 -d12s --discard-body --no-progress http://127.0.0.1:18080/cold/big2g.bin > /tmp/fair-dl.txt 2>&1 &
    dl=$!
    sleep 1
    w=$(taskset -c 1 wrk -t1 -c50 -d8s --latency http://127.0.0.1:18080/4k.bin)
    wait $dl
    echo "round $r $bin: 4 KB $(echo "$w" | awk '/Requests\/sec/{print $2}') req/s, p50 $(echo "$w" | awk '$1=="50%"{print $2}'), p99 $(echo "$w" | awk '$1=="99%"{print $2}'); download: $(awk '/Transfer\/sec/{print $2, $3}' /tmp/fair-dl.txt)"
    pkill -f startsrv.py; kill $(ss -ltnpH 'sport = :18080' | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u) 2>/dev/null
    for i in $(seq 1 100); do ss -ltnH 'sport = :18080' | grep -q . || break; sleep 0.1; done
  done
done
