#!/bin/bash
# Both builds up at once (old on 18798, new on 18799, both pinned to CPU 0), the SPECweb99
# GET through the component in alternating 3 s bursts; requests per server CPU-second.
Q="?/file_set/dir00001/class1_3"
CFG=$(cd "$(dirname "$0")" && pwd)/../2026-11-27-wasm-request/cg.toml
sed s/18799/18798/ "$CFG" > /tmp/ab/old.toml
taskset -c 0 /tmp/ab/ramjet-old serve -c /tmp/ab/old.toml > old.log 2>&1 & O=$!
taskset -c 0 /tmp/ab/ramjet-new serve -c "$CFG" > new.log 2>&1 & N=$!
sleep 2
for port in 18798 18799; do curl -s -o /dev/null "http://127.0.0.1:$port/s99w?command/Reset&maxload=10&pttime=300&maxthread=10&exp=5,105&urlroot=/file_set/"; done
one() { read u0 s0 < <(awk '{print $14, $15}' /proc/$1/stat)
  n=$(taskset -c 1 /tmp/ab/ramjet-new bench -c 50 -d 3s "http://127.0.0.1:$2/s99w$Q" 2>&1 | grep -oP '^\s*\K[0-9]+(?= responses)')
  read u1 s1 < <(awk '{print $14, $15}' /proc/$1/stat); echo $(( n * 100 / (u1-u0+s1-s0) )); }
for i in $(seq 1 12); do echo "$i old $(one $O 18798) new $(one $N 18799)"; done
kill $O $N
