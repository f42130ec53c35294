port=$1; path=${2:-/21k.html}
nstat -n >/dev/null
out=$( { /usr/bin/time -f "%U %S" taskset -c 1 wrk -t1 -c50 -d5s http://127.0.0.1:$port$path; } 2>&1 )
ns=$(nstat TcpOutSegs TcpInSegs TcpExtTCPHPAcks TcpExtTCPPureAcks TcpExtDelayedACKs 2>/dev/null | awk 'NR>1{printf "%s=%s ", $1, $2}')
reqs=$(echo "$out" | awk '/requests in/{print $1}')
cpu=$(echo "$out" | tail -1)
python3 -c "
r=$reqs; u,s='$cpu'.split(); print('port $port req=%d us/resp client=%.2f (user %.2f sys %.2f)' % (r, (float(u)+float(s))*1e6/r, float(u)*1e6/r, float(s)*1e6/r))"
echo "  $ns" | sed 's/Tcp//g' | awk -v r=$reqs '{for(i=1;i<=NF;i++){split($i,a,"="); printf "%s/req=%.2f ", a[1], a[2]/r}; print ""}'
