# [COUNTERS="nstat counters"] bash discard-one.sh NAME PID PORT: 4 discarding clients (ramjet bench) for 5 s
# against a running server; cpu = its ticks, ksirq0 = ksoftirqd/0 ticks, nstat deltas.
name=$1; pid=$2; port=$3
k0=$(pgrep -x ksoftirqd/0)
a0=$(awk '{print $14+$15}' /proc/$k0/stat)
nstat -n
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
r=$(/work/main/target/release/ramjet bench --cpus 1 -t1 -c4 -d5s --discard-body http://127.0.0.1:$port/100m.bin 2>&1 | grep -i "requests/sec" | head -1)
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
b0=$(awk '{print $14+$15}' /proc/$k0/stat)
ns=$(nstat ${COUNTERS:-TcpRetransSegs TcpOutSegs TcpExtTCPDSACKRecv} 2>/dev/null | awk 'NR>1{printf "%s=%s ",$1,$2}')
echo "$name $r cpu=$((t1-t0)) ksirq0=$((b0-a0)) $ns"
