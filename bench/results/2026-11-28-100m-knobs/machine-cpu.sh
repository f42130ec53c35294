#!/bin/bash
# Whole-machine CPU per response, 100 MB x4 to a discarding client: the server's own ticks
# (/proc/PID/stat) and each CPU's busy ticks (/proc/stat: user, nice, system, irq,
# softirq, steal) over one run, divided by the responses.
#   RAMJET=<a ramjet build for the load> machine-cpu.sh ramjet|nginx [ramjet build to serve]
D=$(cd "$(dirname "$0")/../2026-11-28-paced-call" && pwd)
which=$1; load=${RAMJET:?a ramjet build for the load}; bin=${2:-$load}
if [ "$which" = ramjet ]; then taskset -c 0 "$bin" serve --config $D/ramjet.toml >/tmp/xp-server.log 2>&1 & port=18190
else mkdir -p /tmp/xp-nginx; taskset -c 0 nginx -c $D/nginx.conf -e /tmp/xp-nginx-error.log & port=18191; fi
pid=$!
for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$port/100.bin && break; sleep 0.1; done
taskset -c 1 "$load" bench -t1 -c4 -d2s --discard-body http://127.0.0.1:$port/100m.bin >/dev/null 2>&1
cpu() { awk -v c=$1 '$1==c {print $2+$3+$4+$7+$8+$9, $8}' /proc/stat; }
s0=$(awk '{print $14+$15}' /proc/$pid/stat); a0=($(cpu cpu0)); b0=($(cpu cpu1))
out=$(taskset -c 1 "$load" bench -t1 -c4 -d${DUR:-4}s --discard-body http://127.0.0.1:$port/100m.bin 2>&1)
s1=$(awk '{print $14+$15}' /proc/$pid/stat); a1=($(cpu cpu0)); b1=($(cpu cpu1))
kill $pid; wait $pid 2>/dev/null
rps=$(echo "$out" | grep -i "requests/sec" | awk '{print $2}')
python3 - <<PY
rps = $rps; n = rps * ${DUR:-4}
srv = $((s1 - s0)); c0 = ${a1[0]} - ${a0[0]}; c1 = ${b1[0]} - ${b0[0]}
si0 = ${a1[1]} - ${a0[1]}; si1 = ${b1[1]} - ${b0[1]}
print(f"$which rps {rps:6.2f} | ticks/resp: server {srv/n:.3f} cpu0 {c0/n:.3f} cpu1 {c1/n:.3f} total {(c0+c1)/n:.3f} | softirq cpu0 {si0/n:.3f} cpu1 {si1/n:.3f}")
PY
