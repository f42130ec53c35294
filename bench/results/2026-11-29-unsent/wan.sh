#!/bin/bash
# usage: LOWAT=v BUSY=1 wan.sh
[ -n "$LOWAT" ] && sysctl -qw net.ipv4.tcp_notsent_lowat=$LOWAT
taskset -c 0 ${BIN:-/work/main/target/release/ramjet} serve --config /tmp/x/ramjet-veth.toml >/tmp/x/srv.log 2>&1 & pid=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18080/4k.bin && break; sleep 0.1; done
[ -n "$BUSY" ] && { taskset -c 1 wrk -t1 -c200 -d12s http://127.0.0.1:18080/4k.bin > /tmp/x/busy.txt & wp=$!; sleep 1; }
s=""; for i in 1 2 3; do s="$s $(ip netns exec t1 taskset -c 1 curl -s -o /dev/null -w '%{speed_download}' http://10.9.0.1:18090/100m.bin | awk '{printf "%.0f", $1*8/1e6}')"; done
[ -n "$BUSY" ] && { wait $wp; busy=$(awk '/Requests\/sec/{print $2}' /tmp/x/busy.txt); }
echo "lowat=${LOWAT:-default} busy=${BUSY:-0} Mbit/s:$s  small rps=$busy"
kill $pid; wait $pid 2>/dev/null
sysctl -qw net.ipv4.tcp_notsent_lowat=4294967295
