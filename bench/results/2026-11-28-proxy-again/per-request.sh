#!/bin/bash
# System calls, CPU ticks and user-space instructions per proxied request, ramjet against
# HAProxy, configured as bench/proxy.py configures them (ramjet: one worker, a location
# ["static", "proxy"] whose files miss; HAProxy: nbthread 1, http-reuse always), in front of
# bench/minhttpd.c on 127.0.0.1:18190. The proxy on CPU 0; the backend and the load
# (ramjet bench) on CPU 1.
#   per-request.sh syscalls ramjet|haproxy [C]   perf stat -e 'syscalls:sys_enter_*', 30,000 requests at -c C (500)
#   per-request.sh cpu ramjet|haproxy [C]        utime and stime ticks for 30,000 requests at -c C (50)
#   per-request.sh callgrind ramjet|haproxy      instructions, 20,000 requests at -c 10 after 2,000 to warm up
#   per-request.sh faults ramjet|haproxy [C]     page faults, madvise, mprotect and task-clock, 60,000 requests at -c C (500)
#   BACKEND_FLAGS=-x per-request.sh ...          a backend that closes after each response
#   BIN=/path/to/ramjet per-request.sh ...       another build (default: this tree's release build)
set -u
WHAT=$1 WHO=$2
BIN=$(realpath "${BIN:-/work/main/target/release/ramjet}")
LOAD=/work/main/target/release/ramjet
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d /tmp/proxy-per-request.XXXX)
cc -O2 -o "$W/minhttpd" "$HERE/../../minhttpd.c"
mkdir -p "$W/local"
cat > "$W/ramjet.toml" <<CONF
listen = ["127.0.0.1:18191"]
workers = 1
[log]
access = "off"
[timeouts]
keepalive = "300s"
header = "300s"
[upstream.app]
servers = ["127.0.0.1:18190"]
keepalive = 600
keepalive_timeout = "60s"
[[location]]
root = "$W/local"
handlers = ["static", "proxy"]
proxy = "app"
CONF
cat > "$W/haproxy.cfg" <<CONF
global
  nbthread 1
  maxconn 9000
defaults
  mode http
  option http-keep-alive
  option forwardfor
  http-reuse always
  timeout connect 5s
  timeout client 300s
  timeout server 300s
  timeout http-keep-alive 300s
frontend f
  bind 127.0.0.1:18193
  default_backend b
backend b
  server app 127.0.0.1:18190 maxconn 1000
CONF
if [ "$WHO" = haproxy ]; then CMD=(haproxy -db -f "$W/haproxy.cfg"); PORT=18193
else CMD=("$BIN" serve -c "$W/ramjet.toml"); PORT=18191; fi
U=http://127.0.0.1:$PORT/b/4k.bin
taskset -c 1 "$W/minhttpd" -p 18190 -c 1 -s 4096 -a 127.0.0.1 ${BACKEND_FLAGS:-} >/dev/null 2>&1 &
M=$!
cd "$W" || exit 1
case $WHAT in
  callgrind) taskset -c 0 valgrind --tool=callgrind --dump-instr=no "${CMD[@]}" >vg.log 2>&1 & P=$!; C=10 ;;
  syscalls) taskset -c 0 "${CMD[@]}" >server.log 2>&1 & P=$!; C=${3:-500} ;;
  cpu) taskset -c 0 "${CMD[@]}" >server.log 2>&1 & P=$!; C=${3:-50} ;;
  faults) taskset -c 0 "${CMD[@]}" >server.log 2>&1 & P=$!; C=${3:-500} ;;
  *) echo "syscalls, cpu, callgrind or faults"; exit 2 ;;
esac
for _ in $(seq 1 120); do curl -s -o /dev/null "$U" && break; sleep 0.5; done
timeout 120 "$LOAD" bench -c "$C" -n 2000 "$U" >/dev/null 2>&1
case $WHAT in
  callgrind)
    N=20000
    callgrind_control -z $P >/dev/null
    timeout 300 "$LOAD" bench -c 10 -n $N "$U" >/dev/null 2>&1
    callgrind_control -d $P >/dev/null
    kill $P; wait $P 2>/dev/null
    T=$(grep ^summary callgrind.out.*.1 | awk '{print $2}')
    echo "$WHO: $((T / N)) instructions per proxied request (profile: $W/callgrind.out.*.1)" ;;
  syscalls)
    N=30000
    perf stat -e 'syscalls:sys_enter_*' -p $P -o perf.txt & S=$!
    sleep 0.3
    timeout 60 taskset -c 1 "$LOAD" bench -c "$C" -n $N "$U" 2>&1 | grep -i "requests/sec"
    kill -INT $S; wait $S
    kill $P; wait $P 2>/dev/null
    echo "$WHO, -c $C, calls per request:"
    awk -v N=$N '$1 ~ /^[0-9,]+$/ && $1 != "0" {gsub(",", "", $1); printf "%-14s %.3f\n", $2, $1 / N}' perf.txt \
      | sed 's/syscalls:sys_enter_//' | sort -k2 -nr | awk '$2 >= 0.005' ;;
  faults)
    N=60000
    perf stat -e page-faults,syscalls:sys_enter_madvise,syscalls:sys_enter_mprotect,task-clock -p $P -o perf.txt & S=$!
    sleep 0.3
    R=$(timeout 60 taskset -c 1 "$LOAD" bench -c "$C" -n $N "$U" 2>&1 | grep -i "requests/sec")
    kill -INT $S; wait $S
    kill $P; wait $P 2>/dev/null
    echo "$WHO -c $C ${MALLOC_TRIM_THRESHOLD_:+MALLOC_TRIM_THRESHOLD_=$MALLOC_TRIM_THRESHOLD_ }$R, per request:"
    awk -v N=$N '$1 ~ /^[0-9,.]+$/ && $2 != "seconds" {gsub(",", "", $1); printf "  %-30s %.4f\n", $2 ($2 == "msec" ? " (task-clock)" : ""), $1 / N}' perf.txt ;;
  cpu)
    N=30000
    read -r u0 s0 < <(awk '{print $14, $15}' /proc/$P/stat)
    R=$(timeout 60 taskset -c 1 "$LOAD" bench -c "$C" -n $N "$U" 2>&1 | grep -i "requests/sec" | awk '{print $2}')
    read -r u1 s1 < <(awk '{print $14, $15}' /proc/$P/stat)
    kill $P; wait $P 2>/dev/null
    echo "$WHO -c $C: $R req/s, user $((u1 - u0)) system $((s1 - s0)) ticks, $((N * 100 / (u1 - u0 + s1 - s0))) requests per CPU-second" ;;
esac
kill $M; wait 2>/dev/null
