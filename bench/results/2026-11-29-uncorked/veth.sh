#!/bin/bash
# veth.sh "ENV:BIN" ...: a client in netns t1 over a veth (mtu 1500, no shaping): 4 discarding, then 4 copying clients
# Setup (as root): ip netns add t1; ip link add va type veth peer name vb; ip link set vb netns t1;
# ip addr add 10.9.0.1/24 dev va; ip link set va up; ip -n t1 addr add 10.9.0.2/24 dev vb;
# ip -n t1 link set vb up; ip -n t1 link set lo up. Afterwards: ip netns del t1.
cfg=$(dirname "$0")/../2026-11-29-unsent/ramjet-veth.toml
for round in 1 2 3; do
 for v in "$@"; do
  e=${v%%:*}; bin=${v#*:}
  env $e taskset -c 0 $bin serve --config $cfg > /dev/null 2>&1 &
  mp=$!; for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18080/4k.bin && break; sleep 0.1; done
  t0=$(awk '{print $14+$15}' /proc/$mp/stat); nstat -n
  d=$(ip netns exec t1 /work/main/target/release/ramjet bench --cpus 1 -t1 -c4 -d5s --discard-body http://10.9.0.1:18090/100m.bin 2>&1 | grep -i "requests/sec" | awk '{print $2}')
  t1=$(awk '{print $14+$15}' /proc/$mp/stat); rd=$(nstat TcpRetransSegs | awk 'NR>1{print $2}')
  c=$(ip netns exec t1 /work/main/target/release/ramjet bench --cpus 1 -t1 -c4 -d5s http://10.9.0.1:18090/100m.bin 2>&1 | grep -i "requests/sec" | awk '{print $2}')
  t2=$(awk '{print $14+$15}' /proc/$mp/stat)
  echo "$e discard=$d cpu=$((t1-t0)) retrans=${rd:-0} | copy=$c cpu=$((t2-t1))"
  kill $mp; wait $mp 2>/dev/null
 done
done
