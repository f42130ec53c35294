#!/bin/bash
# syscall counts of the server during 4 s of 100 MB x4 discarding: sc.sh ramjet|nginx [ramjet build]
source "$(dirname "$0")/serve.sh"
sleep 0.5
(taskset -c 1 $bin bench -t1 -c4 -d7s --discard-body http://127.0.0.1:$port/100m.bin > /tmp/sc-bench.out 2>&1 &)
sleep 1.5
perf stat -e 'syscalls:sys_enter_sendfile64,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_setsockopt,syscalls:sys_enter_writev,syscalls:sys_enter_recvfrom,syscalls:sys_enter_read,syscalls:sys_enter_cachestat,syscalls:sys_enter_getsockopt' -p $pid -- sleep 4 2>&1 | grep -E "syscalls" 
sleep 2.5; grep Requests /tmp/sc-bench.out
kill $pid
sleep 0.5
