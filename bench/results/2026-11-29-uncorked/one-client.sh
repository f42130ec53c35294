#!/bin/bash
# one-client.sh "ENV=V:BIN" ...: one connection, 100 MB, discarding (ramjet bench -c1) then copying
# (wrk -c1), 4 s each, variants alternating, 3 rounds; server CPU ticks and data segments per response.
for round in 1 2 3; do
 for v in "$@"; do
  bin=${v#*:}; e=${v%%:*}
  env $e taskset -c 0 $bin serve --config /tmp/srv/ramjet/ramjet.toml > /dev/null 2>&1 &
  mp=$!; for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18080/4k.bin && break; sleep 0.1; done
  t0=$(awk '{print $14+$15}' /proc/$mp/stat); nstat -n
  d=$(/work/main/target/release/ramjet bench --cpus 1 -t1 -c1 -d4s --discard-body http://127.0.0.1:18080/100m.bin 2>&1 | grep -i "requests/sec" | awk '{print $2}')
  t1=$(awk '{print $14+$15}' /proc/$mp/stat); ds=$(nstat TcpExtTCPOrigDataSent | awk 'NR>1{print $2}')
  c=$(taskset -c 1 wrk -t1 -c1 -d4s http://127.0.0.1:18080/100m.bin 2>&1 | grep -i "requests/sec" | awk '{print $2}')
  t2=$(awk '{print $14+$15}' /proc/$mp/stat); cs=$(nstat TcpExtTCPOrigDataSent | awk 'NR>1{print $2}')
  echo "$e discard=$d cpu=$((t1-t0)) segs/resp=$(python3 -c "print(int($ds/($d*4)))") | copy=$c cpu=$((t2-t1)) segs/resp=$(python3 -c "print(int($cs/($c*4)))")"
  kill $mp; wait $mp 2>/dev/null
 done
done
