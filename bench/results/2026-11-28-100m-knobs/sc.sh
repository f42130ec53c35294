#!/bin/bash
# syscall counts of the server during 4 s of 100 MB x4 discarding: sc.sh ramjet|nginx
D=/work/main/bench/results/2026-11-28-paced-call
which=$1
if [ $which = ramjet ]; then taskset -c 0 ${RAMJET:?a ramjet build} serve --config $D/ramjet.toml >/tmp/xp-server.log 2>&1 & port=18190
else mkdir -p /tmp/xp-nginx; taskset -c 0 nginx -c $D/nginx.conf -e /tmp/xp-nginx-error.log & port=18191; fi
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$port/100.bin && break; sleep 0.1; done
sleep 0.5
if [ $which = ramjet ]; then pid=$(pgrep -f "ramjet-B serve --config"); else pid=$(pgrep -f "nginx -c $D/nginx.conf" | head -1); fi
(taskset -c 1 ${RAMJET:?a ramjet build} bench -t1 -c4 -d7s --discard-body http://127.0.0.1:$port/100m.bin > /tmp/sc-bench.out 2>&1 &)
sleep 1.5
perf stat -e 'syscalls:sys_enter_sendfile64,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_setsockopt,syscalls:sys_enter_writev,syscalls:sys_enter_recvfrom,syscalls:sys_enter_read,syscalls:sys_enter_cachestat,syscalls:sys_enter_getsockopt' -p $pid -- sleep 4 2>&1 | grep -E "syscalls" 
sleep 2.5; grep Requests /tmp/sc-bench.out
if [ $which = ramjet ]; then kill $(pgrep -f "ramjet-B serve --config"); else kill $pid; fi
sleep 0.5
