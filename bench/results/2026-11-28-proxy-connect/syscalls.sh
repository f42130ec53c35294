#!/bin/bash
# System calls per proxied request to a backend that closes after each response, counted by
# `perf stat -e 'syscalls:sys_enter_*'` on the proxy over 10,000 requests at -c 10.
#   syscalls.sh BIN     (the proxy on CPU 0; bench/minhttpd.c -x and the load on CPU 1)
BIN=$(realpath "${1:?a ramjet build}")
LOAD=/work/main/target/release/ramjet
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d /tmp/syscalls-close.XXXX)
cc -O2 -o "$W/minhttpd" "$HERE/../../minhttpd.c"
cat > "$W/r.toml" <<CONF
listen = ["127.0.0.1:18191"]
workers = 1
[log]
access = "off"
[upstream.app]
servers = ["127.0.0.1:18190"]
[[location]]
proxy = "app"
CONF
taskset -c 1 "$W/minhttpd" -p 18190 -c 1 -s 100 -a 127.0.0.1 -x >/dev/null 2>&1 & M=$!
taskset -c 0 "$BIN" serve -c "$W/r.toml" >"$W/server.log" 2>&1 & P=$!
for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18191/x && break; sleep 0.1; done
"$LOAD" bench -c 10 -n 2000 http://127.0.0.1:18191/x >/dev/null 2>&1
perf stat -e 'syscalls:sys_enter_*' -p $P -o "$W/perf.txt" -- sleep 4 & S=$!
sleep 0.3
taskset -c 1 "$LOAD" bench -c 10 -n 10000 http://127.0.0.1:18191/x 2>&1 | grep -i "requests/sec"
wait $S
kill $P $M; wait 2>/dev/null
awk '$1 ~ /^[0-9,]+$/ && $1 != "0" {gsub(",", "", $1); printf "%-12s %.2f\n", $2, $1 / 10000}' "$W/perf.txt" \
  | sed 's/syscalls:sys_enter_//' | sort -k2 -nr | awk '$2 >= 0.01'
