#!/bin/bash
# Build the shim first: gcc -O2 -shared -fPIC -o /tmp/wrkshim/shim.so shim.c -ldl (or set SHIM).
# run.sh SRV PORT TAG [SECONDS]: start SRV as bench/compare.py configures it (ramjet: BIN, default
# this tree's release build), run one `wrk -t1 -c4` copying run of 100m.bin under shim.so, stop
# SRV, and print wrk's figures and analyze.py's. SS=1: sample `ss -tin` meanwhile (ss_sample.py)
# and print windows.py's account of the slowest responses instead.
D=$(cd "$(dirname "$0")" && pwd)
SRV=$1; PORT=$2; TAG=$3; SECS=${4:-10}
listener() { ss -ltnpH "sport = :$PORT" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u; }
# Another server still on the port would be measured in this one's place: refuse.
[ -n "$(listener)" ] && { echo "port $PORT is taken by pid $(listener)" >&2; exit 1; }
if [ "$SRV" = minhttpd ]; then  # bench/minhttpd.c built as /tmp/minhttpd-l, serving 100m.bin with $FLAGS
  (setsid /tmp/minhttpd-l -p $PORT -c 0 -f /tmp/ramjet-bench/www/100m.bin $FLAGS > /dev/null 2>&1 &)
else (SRV=$SRV BIN=$BIN setsid python3 "$D/startsrv.py" > /dev/null 2>&1 &); fi
for i in $(seq 1 100); do curl -s -o /dev/null -r 0-0 http://127.0.0.1:$PORT/100m.bin && break; sleep 0.1; done
[ -n "$SS" ] && { taskset -c 1 python3 "$D/ss_sample.py" $PORT $SECS /tmp/wrk-ss-$TAG.txt & }
SERVED_BY=$(for p in $(listener); do readlink /proc/$p/exe; done | sort -u | tr '\n' ' ')
HEAD=$(curl -s -D - -o /dev/null http://127.0.0.1:$PORT/100m.bin | wc -c)
SHIM_OUT=/tmp/wrk-runs-$TAG.txt LD_PRELOAD=${SHIM:-/tmp/wrkshim/shim.so} taskset -c 1 wrk -t1 -c4 -d${SECS}s --latency \
  http://127.0.0.1:$PORT/100m.bin > /tmp/wrk-$TAG.txt
SERVER_PIDS=$(listener)
pkill -f "startsrv.py"
kill $SERVER_PIDS
for i in $(seq 1 100); do [ -z "$(listener)" ] && break; sleep 0.1; done
echo "== $TAG ($SERVED_BY): $(grep -E "requests in" /tmp/wrk-$TAG.txt | tr -s ' ') p50 $(awk '$1=="50%"{print $2}' /tmp/wrk-$TAG.txt) p99 $(awk '$1=="99%"{print $2}' /tmp/wrk-$TAG.txt)"
wait
if [ -n "$SS" ]; then python3 "$D/windows.py" /tmp/wrk-runs-$TAG.txt /tmp/wrk-ss-$TAG.txt "$HEAD"
else python3 "$D/analyze.py" /tmp/wrk-runs-$TAG.txt "$HEAD"; fi
