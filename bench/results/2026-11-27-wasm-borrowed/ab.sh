#!/bin/bash
# A/B: old vs new build; native and wasm greeting and SPECweb99 GET; requests per server CPU-second
Q="?/file_set/dir00001/class1_3"
# ramjet-old and ramjet-new: the two builds (cargo build --release --features wasm), copied to /tmp/ab/.
CFG=${CFG:-$(cd "$(dirname "$0")" && pwd)/../2026-11-27-wasm-request/cg.toml}
run() { # pid path
  read u0 s0 < <(awk '{print $14, $15}' /proc/$1/stat)
  OUT=$(taskset -c 1 /tmp/ab/ramjet-new bench -c 50 -d 5s "http://127.0.0.1:18799$2" 2>&1)
  read u1 s1 < <(awk '{print $14, $15}' /proc/$1/stat)
  N=$(echo "$OUT" | grep -oP '^\s*\K[0-9]+(?= responses)')
  echo $(( N * 100 / (u1-u0+s1-s0) ))
}
for round in 1 2 3 4 5 6; do
 for b in old new; do
  taskset -c 0 /tmp/ab/ramjet-$b serve -c $CFG > /tmp/ab/srv-$b.log 2>&1 &
  SP=$!
  for i in $(seq 1 100); do curl -s -o /dev/null http://127.0.0.1:18799/n/x && break; sleep 0.1; done
  for p in /s99n /s99w; do curl -s -o /dev/null "http://127.0.0.1:18799$p?command/Reset&maxload=10&pttime=300&maxthread=10&exp=5,105&urlroot=/file_set/"; done
  line="$b round $round:"
  for P in "/n/x?y=1" "/w/x?y=1" "/s99n$Q" "/s99w$Q"; do line="$line $(run $SP "$P")"; done
  echo "$line"
  kill $SP; wait $SP 2>/dev/null
 done
done
