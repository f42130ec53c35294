#!/bin/bash
# User-space instructions per request of one ramjet worker under callgrind.
#   callgrind.sh PATH [CONFIG] [N]           e.g. callgrind.sh "/s99w?/file_set/dir00001/class1_3"
#   CAD=1 callgrind.sh PATH                  with the SPECweb99 cookie, after a Reset of the mount
#   BIN=/path/to/ramjet callgrind.sh ...     another build (default: this tree's release build)
# The server listens on 127.0.0.1:18799 (cg.toml in this directory); 300 requests warm it
# up at -c 1, then the counters are zeroed and N (2000) more are counted.
P=$1; CFG=${2:-cg.toml}; N=${3:-2000}; BIN=${BIN:-/work/main/target/release/ramjet}
rm -f callgrind.out.*
valgrind --tool=callgrind --dump-instr=no "$BIN" serve -c "$CFG" > vg.log 2>&1 &
VG=$!
for i in $(seq 1 120); do curl -s -o /dev/null "http://127.0.0.1:18799$P" && break; sleep 1; done
H=()
if [ "${CAD:-0}" = 1 ]; then
  MOUNT=${P%%\?*}
  curl -s -o /dev/null "http://127.0.0.1:18799$MOUNT?command/Reset&maxload=10&pttime=300&maxthread=10&exp=5,105&urlroot=/file_set/"
  H=(-H "Cookie: my_cookie=user_id=10003&last_ad=5")
fi
"$BIN" bench -c 1 -n 300 "${H[@]}" "http://127.0.0.1:18799$P" >/dev/null 2>&1
callgrind_control -z $VG >/dev/null
"$BIN" bench -c 1 -n "$N" "${H[@]}" "http://127.0.0.1:18799$P" >/dev/null 2>&1
callgrind_control -d $VG >/dev/null
kill $VG; wait $VG 2>/dev/null
T=$(grep ^summary callgrind.out.*.1 | awk '{print $2}')
echo "$P: $((T / N)) instructions per request"
