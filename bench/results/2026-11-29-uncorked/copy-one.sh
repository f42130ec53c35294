# copy-one.sh NAME PID PORT: wrk -t1 -c4 -d5s /100m.bin on CPU 1 against a running server; cpu = its
# ticks in the run, nstat deltas (TcpExtTCPOrigDataSent: data segments sent by the host).
name=$1; pid=$2; port=$3
t0=$(awk '{print $14+$15}' /proc/$pid/stat)
nstat -n
r=$(taskset -c 1 wrk -t1 -c4 -d5s http://127.0.0.1:$port/100m.bin 2>&1 | grep -i "requests/sec" | head -1)
t1=$(awk '{print $14+$15}' /proc/$pid/stat)
ns=$(nstat TcpExtTCPOrigDataSent TcpRetransSegs 2>/dev/null | awk 'NR>1{printf "%s=%s ",$1,$2}')
echo "$name $r cpu=$((t1-t0)) $ns"
