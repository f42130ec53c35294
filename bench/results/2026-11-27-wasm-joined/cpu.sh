#!/bin/bash
# server CPU µs per request (user, sys) at -c $C for $1 with optional header $2
# Run against a server started as `taskset -c 0 ramjet serve -c cg.toml` (../2026-11-27-wasm-request/cg.toml),
# after a SPECweb99 Reset of /s99n and /s99w; e.g. cpu.sh "/s99w?/file_set/dir00001/class1_3" "Cookie: my_cookie=user_id=10003&last_ad=5"
P=$1; H=$2; C=${C:-50}
PID=$(pgrep -f "ramjet serve -c ${CFG:-cg.toml}" | head -1)
read u0 s0 < <(awk '{print $14, $15}' /proc/$PID/stat)
if [ -n "$H" ]; then OUT=$(taskset -c 1 /work/main/target/release/ramjet bench -c $C -d 5s -H "$H" "http://127.0.0.1:18799$P" 2>&1); else OUT=$(taskset -c 1 /work/main/target/release/ramjet bench -c $C -d 5s "http://127.0.0.1:18799$P" 2>&1); fi
read u1 s1 < <(awk '{print $14, $15}' /proc/$PID/stat)
N=$(echo "$OUT" | grep -oP '^\s*\K[0-9]+(?= responses)')
echo "$P ${H:+(cookie)}: $N responses, user $(( (u1-u0)*10000000/N /1000 )).$(( (u1-u0)*10000000/N %1000 / 100)) µs, sys $(( (s1-s0)*10000000/N /1000 )).$(( (s1-s0)*10000000/N %1000 /100)) µs per request"
