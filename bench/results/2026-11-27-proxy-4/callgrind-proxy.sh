#!/bin/bash
# User-space instructions per proxied request: one ramjet worker under callgrind on
# 127.0.0.1:18191 (location ["static", "proxy"], a miss on disk, so both handlers run)
# forwarding to bench/minhttpd.c (100-byte answers) on 127.0.0.1:18190. 2,000 requests at
# -c 10 warm it up, then the counters are zeroed and N (20,000) more are counted.
#   callgrind-proxy.sh [N]          BIN=/path/to/ramjet callgrind-proxy.sh   another build
#   MINHTTPD_FLAGS=-x callgrind-proxy.sh    a backend that closes after each response
N=${1:-20000}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(realpath "${BIN:-/work/main/target/release/ramjet}")
LOAD=/work/main/target/release/ramjet
W=$(mktemp -d /tmp/callgrind-proxy.XXXX)
cc -O2 -o "$W/minhttpd" "$HERE/../../minhttpd.c"
mkdir -p "$W/local"
cat > "$W/r.toml" <<EOF
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
EOF
"$W/minhttpd" -p 18190 -c 1 -s 100 -a 127.0.0.1 $MINHTTPD_FLAGS >/dev/null 2>&1 &
M=$!
cd "$W" || exit 1
valgrind --tool=callgrind --dump-instr=no "$BIN" serve -c "$W/r.toml" > vg.log 2>&1 &
VG=$!
U=http://127.0.0.1:18191/b/100.bin
for _ in $(seq 1 120); do curl -s -o /dev/null "$U" && break; sleep 1; done
"$LOAD" bench -c 10 -n 2000 "$U" >/dev/null 2>&1
callgrind_control -z $VG >/dev/null
"$LOAD" bench -c 10 -n "$N" "$U" >/dev/null 2>&1
callgrind_control -d $VG >/dev/null
kill $VG; wait $VG 2>/dev/null; kill $M
T=$(grep ^summary callgrind.out.*.1 | awk '{print $2}')
echo "$BIN: $((T / N)) instructions per proxied request (profile: $W/callgrind.out.*.1)"
