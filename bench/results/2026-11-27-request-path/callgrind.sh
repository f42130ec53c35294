#!/bin/bash
# User-space instructions per request of one ramjet worker serving a static file, under callgrind.
#   callgrind.sh URL [N] [ramjet bench args]   e.g. callgrind.sh http://127.0.0.1:18090/4k.bin 20000 --pipeline 4
#   BIN=/path/to/ramjet callgrind.sh ...       another build (default: this tree's release build)
# cg.toml serves /tmp/ramjet-bench/www (bench/compare.py makes it) on 127.0.0.1:18090; 2,000
# requests at -c 10 warm it up, then the counters are zeroed and N (20,000) more are counted.
# Needs valgrind; ramjet opens files without openat2 under it (valgrind 3.19 has none).
U=$1; N=${2:-20000}; shift; [ $# -gt 0 ] && shift
BIN=${BIN:-/work/main/target/release/ramjet}
rm -f callgrind.out.*
valgrind --tool=callgrind --dump-instr=no "$BIN" serve -c "$(dirname "$0")/cg.toml" > vg.log 2>&1 &
VG=$!
for i in $(seq 1 120); do curl -s -o /dev/null "$U" && break; sleep 1; done
/work/main/target/release/ramjet bench -c 10 -n 2000 "$@" "$U" >/dev/null 2>&1
callgrind_control -z $VG >/dev/null
/work/main/target/release/ramjet bench -c 10 -n "$N" "$@" "$U" >/dev/null 2>&1
callgrind_control -d $VG >/dev/null
kill $VG; wait $VG 2>/dev/null
T=$(grep ^summary callgrind.out.*.1 | awk '{print $2}')
echo "$U $*: $((T / N)) instructions per request"
