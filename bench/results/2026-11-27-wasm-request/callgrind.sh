#!/bin/bash
# instructions per request (user space, server) for path $1, with config $2
P=$1; CFG=${2:-cg.toml}; N=${3:-2000}
rm -f callgrind.out.*
valgrind --tool=callgrind --dump-instr=no /work/main/target/release/ramjet serve -c $CFG > vg.log 2>&1 &
VG=$!
for i in $(seq 1 120); do curl -s -o /dev/null "http://127.0.0.1:18799$P" && break; sleep 1; done
/work/main/target/release/ramjet bench -c 1 -n 300 "http://127.0.0.1:18799$P" >/dev/null 2>&1
callgrind_control -z $VG >/dev/null
/work/main/target/release/ramjet bench -c 1 -n $N "http://127.0.0.1:18799$P" >/dev/null 2>&1
callgrind_control -d $VG >/dev/null
kill $VG; wait $VG 2>/dev/null
T=$(grep ^summary callgrind.out.*.1 | awk '{print $2}')
echo "$P: $((T / N)) instructions per request"
