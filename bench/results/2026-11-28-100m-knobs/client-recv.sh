#!/bin/bash
# The client's recvfrom and epoll_wait calls per response (perf stat on the client for 3 s of a
# 6 s run of 100 MB x4, discarding): RAMJET=<a ramjet build> client-recv.sh ramjet|nginx
D=$(cd "$(dirname "$0")/../2026-11-28-paced-call" && pwd)
which=$1; bin=${RAMJET:?a ramjet build}
if [ $which = ramjet ]; then taskset -c 0 $bin serve --config $D/ramjet.toml >/tmp/xp-server.log 2>&1 & port=18190
else mkdir -p /tmp/xp-nginx; taskset -c 0 nginx -c $D/nginx.conf -e /tmp/xp-nginx-error.log & port=18191; fi
pid=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$port/100.bin && break; sleep 0.1; done
taskset -c 1 $bin bench -t1 -c4 -d6s --discard-body http://127.0.0.1:$port/100m.bin > /tmp/crecv.out 2>&1 &
sleep 1.5; cpid=$(pgrep -f "bench -t1 -c4 -d6s" | head -1)
perf stat -e 'syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait' -p $cpid -o /tmp/crecv.perf -- sleep 3
wait $cpid 2>/dev/null; while pgrep -f "bench -t1 -c4 -d6s" >/dev/null; do sleep 0.2; done; kill $pid; wait $pid 2>/dev/null
rps=$(grep -i "requests/sec" /tmp/crecv.out | awk '{print $2}')
r=$(grep recvfrom /tmp/crecv.perf | awk '{gsub(",","",$1); print $1}'); e=$(grep epoll_wait /tmp/crecv.perf | awk '{gsub(",","",$1); print $1}')
python3 -c "n=$rps*3; print('$which rps', $rps, 'client recvfrom/resp', round($r/n,1), 'bytes/recv', round(104857600*n/$r), 'epoll_wait/resp', round($e/n,1))"
