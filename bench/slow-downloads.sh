#!/usr/bin/env bash
# The mirror scenario: hold N concurrent slow downloads from ramjet on this machine.
#
# Starts `ramjet serve --processes SERVERS` (processes sharing one port through SO_REUSEPORT;
# each may hold at most the per-process open-file limit, 20,000 here), all on CPU 0, and runs
# `ramjet bench --slow` on CPU 1, which spreads the connections over enough processes and
# 127.0.0.x source addresses. Writes OUT/report.md with what held and what limited it.
#
#   bench/slow-downloads.sh [CONNECTIONS=100000] [RATE=8kbit] [DURATION=60s] [OUT=bench/results/DATE-slow]
# Environment: SEND_BUFFER (server SO_SNDBUF, default 4k), RECV_BUFFER (client SO_RCVBUF,
# default 4096), READ_EVERY (client read period, default 2s), SERVERS (server processes),
# TCP_MEM (net.ipv4.tcp_mem "low pressure high" in pages for the run, restored after; by
# default the kernel's own, which it sizes from RAM),
# BIN (a ramjet build to serve, default this tree's, built first),
# SERVER (ramjet, or nginx: the same run against nginx with SERVERS worker processes,
# sendfile, the same send buffer and the same CPU, for the memory comparison).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}
RATE=${2:-8kbit}
DURATION=${3:-60s}
OUT=${4:-bench/results/$(date +%F)-slow}
PORT=18090
# SO_SNDBUF per client connection on the server: bounds the kernel memory each slow
# download pins (the kernel's autotuning lets each grow towards tcp_wmem's 4 MiB).
SEND_BUFFER=${SEND_BUFFER:-4k}
RECV_BUFFER=${RECV_BUFFER:-4096}
READ_EVERY=${READ_EVERY:-2s}
# Connection attempts in flight per client process: more ramps faster but overflows the
# servers' accept queues when the CPU is saturated (the dropped handshakes become timeouts).
CONNECT_CONCURRENCY=${CONNECT_CONCURRENCY:-64}
# BIN: another build to measure (then nothing is built); the client is always this tree's.
BIN=${BIN:-}
LOAD=target/release/ramjet
SERVER=${SERVER:-ramjet}
WORK=$(mktemp -d /tmp/ramjet-slow.XXXXXX)
HARD=$(ulimit -Hn)
# Servers: enough processes that none needs more than ~70% of its open-file limit, as the
# kernel's SO_REUSEPORT hash spreads connections only roughly evenly.
SERVERS=${SERVERS:-$(( (N * 10 / 7 + HARD - 1) / HARD ))}
[ "$SERVERS" -ge 1 ] || SERVERS=1
mkdir -p "$OUT" "$WORK/www"
BIN_GIVEN=$BIN
[ -n "$BIN" ] || { cargo build --release --quiet; BIN=$LOAD; }
head -c $((16 << 20)) /dev/urandom > "$WORK/www/file.bin"
# Readable by a server that drops privileges (nginx workers run as www-data).
chmod 755 "$WORK" "$WORK/www"; chmod 644 "$WORK/www/file.bin"
cat > "$WORK/ramjet.toml" <<TOML
listen = ["127.0.0.1:$PORT"]
workers = 1
[limits]
send_buffer = "$SEND_BUFFER"
[log]
access = "off"
[[location]]
root = "$WORK/www"
TOML
pids=()
TCP_MEM_BEFORE=$(cat /proc/sys/net/ipv4/tcp_mem)
BACKLOG_BEFORE=$(cat /proc/sys/net/core/netdev_max_backlog)
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"
  [ -z "${TCP_MEM:-}" ] || echo "$TCP_MEM_BEFORE" > /proc/sys/net/ipv4/tcp_mem
  [ -z "${NETDEV_MAX_BACKLOG:-}" ] || echo "$BACKLOG_BEFORE" > /proc/sys/net/core/netdev_max_backlog
}
trap cleanup EXIT
if [ -n "${TCP_MEM:-}" ]; then echo "$TCP_MEM" > /proc/sys/net/ipv4/tcp_mem; fi
if [ -n "${NETDEV_MAX_BACKLOG:-}" ]; then echo "$NETDEV_MAX_BACKLOG" > /proc/sys/net/core/netdev_max_backlog; fi
if [ "$SERVER" = nginx ]; then
  cat > "$WORK/nginx.conf" <<NGINX
worker_processes $SERVERS;
worker_rlimit_nofile $HARD;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
daemon off;
events { worker_connections $HARD; }
http {
  access_log off;
  sendfile on;
  # One descriptor for the file per worker, not one per download (ramjet shares its own
  # the same way); without it each worker holds half as many downloads under the same
  # open-file limit.
  open_file_cache max=1000 inactive=60s;
  keepalive_timeout 65;
  server {
    listen 127.0.0.1:$PORT reuseport sndbuf=$SEND_BUFFER;
    root $WORK/www;
  }
}
NGINX
  taskset -c 0 nginx -c "$WORK/nginx.conf" 2>"$WORK/server-1.log" &
  pids+=($!)
else
  taskset -c 0 "$BIN" serve --config "$WORK/ramjet.toml" --processes "$SERVERS" 2>"$WORK/server-1.log" &
  pids+=($!)
fi
for _ in $(seq 1 100); do
  curl -s -o /dev/null "http://127.0.0.1:$PORT/file.bin" --max-time 1 -r 0-0 && break
  sleep 0.1
done
# Every server process (nginx: the master and its workers), and their RSS before the load.
server_pids() {
  for p in "${pids[@]}"; do echo "$p"; pgrep -P "$p" 2>/dev/null || true; done
}
rss_all() {
  local total=0 r
  for p in $(server_pids); do
    r=$(awk '/VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0); total=$((total + r))
  done
  echo "$total"
}
base_rss=$(rss_all)

# Sample the kernel's TCP memory and the servers' memory and connections while it runs.
(
  peak_mem=0; peak_inuse=0; peak_rss=0
  while sleep 2; do
    read -r inuse mem < <(awk '/^TCP:/ {print $3, $11}' /proc/net/sockstat)
    rss=$(rss_all)
    [ "$inuse" -gt "$peak_inuse" ] && peak_inuse=$inuse
    [ "$mem" -gt "$peak_mem" ] && peak_mem=$mem
    [ "$rss" -gt "$peak_rss" ] && peak_rss=$rss
    echo "$peak_inuse $peak_mem $peak_rss" > "$WORK/peak"
  done
) &
sampler=$!

CMD=("$LOAD" bench --slow -c "$N" -d "$DURATION" --throttle "$RATE" --recv-buffer "$RECV_BUFFER" --read-every "$READ_EVERY" --connect-concurrency "$CONNECT_CONCURRENCY" --cpus 1 --no-progress "http://127.0.0.1:$PORT/file.bin")
start=$(date +%s)
# The kernel's TCP counters that explain stalls: accept-queue overflows, memory pressure
# (entries, and milliseconds spent under it), receive-queue pruning and drops, and
# retransmission timeouts.
COUNTERS="ListenOverflows TCPMemoryPressures TCPMemoryPressuresChrono PruneCalled RcvPruned TCPRcvQDrop TCPAbortOnMemory TCPTimeouts"
counters() {
  awk -v want="$COUNTERS" '/^TcpExt:/ { if (!h) { for (i = 1; i <= NF; i++) name[i] = $i; h = 1 } else for (i = 1; i <= NF; i++) v[name[i]] = $i }
    END { n = split(want, w, " "); for (k = 1; k <= n; k++) printf "%s ", (w[k] in v ? v[w[k]] : 0); print "" }' /proc/net/netstat
}
# Packets dropped because a CPU's input backlog was full (second column, hex, per CPU).
softnet_drops() { local t=0 d; while read -r _ d _; do t=$((t + 16#$d)); done < /proc/net/softnet_stat; echo "$t"; }
counters_before=$(counters)
drops_before=$(softnet_drops)
"${CMD[@]}" | tee "$WORK/bench.txt"
kill "$sampler" 2>/dev/null || true
read -r peak_inuse peak_mem peak_rss < "$WORK/peak" || true
{
  echo "# Slow downloads: $N connections at $RATE each for $DURATION"
  echo
  echo "Run $(date -u '+%F %H:%M UTC') on $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r)."
  echo "Command: \`${TCP_MEM:+TCP_MEM=\"$TCP_MEM\" }${NETDEV_MAX_BACKLOG:+NETDEV_MAX_BACKLOG=$NETDEV_MAX_BACKLOG }SERVER=$SERVER ${BIN_GIVEN:+BIN=$BIN }SERVERS=$SERVERS READ_EVERY=$READ_EVERY SEND_BUFFER=$SEND_BUFFER CONNECT_CONCURRENCY=$CONNECT_CONCURRENCY bench/slow-downloads.sh $N $RATE $DURATION\`, which ran \`${CMD[*]}\`"
  if [ "$SERVER" = nginx ]; then
    echo "against nginx $(nginx -v 2>&1 | sed 's/.*\///') with $SERVERS worker processes (reuseport, sendfile, open_file_cache, \`sndbuf=$SEND_BUFFER\`, all on CPU 0) serving a 16 MiB file; client SO_RCVBUF $RECV_BUFFER, one read per connection every $READ_EVERY."
  else
    echo "against \`ramjet serve --processes $SERVERS\` (1 worker each, one SO_REUSEPORT port, all on CPU 0) serving a 16 MiB file, \`[limits] send_buffer = \"$SEND_BUFFER\"\`; client SO_RCVBUF $RECV_BUFFER, one read per connection every $READ_EVERY."
  fi
  echo
  echo '```'
  cat "$WORK/bench.txt"
  echo '```'
  echo
  echo "| limit or measure | value |"
  echo "|---|---|"
  echo "| open files per process (hard) | $HARD |"
  echo "| ephemeral ports per source address | $(awk '{print $2 - $1 + 1}' /proc/sys/net/ipv4/ip_local_port_range) |"
  echo "| net.ipv4.tcp_mem (pages: low, pressure, high) | $(tr '\t' ' ' < /proc/sys/net/ipv4/tcp_mem) |"
  echo "| peak TCP sockets in use (both ends) | ${peak_inuse:-?} |"
  echo "| peak TCP memory (pages of 4 KiB) | ${peak_mem:-?} |"
  established=$(grep -oE '^ *[0-9]+ of [0-9]+ connections established' "$WORK/bench.txt" | awk '{print $1}')
  echo "| RSS of all $SERVER processes before the load (KiB) | $base_rss |"
  echo "| peak RSS of all $SERVER processes (KiB) | ${peak_rss:-?} |"
  if [ -n "$established" ] && [ "$established" -gt 0 ] && [ -n "${peak_rss:-}" ]; then
    echo "| user-space memory per download: (peak - before) / established (KiB) | $(awk -v p="$peak_rss" -v b="$base_rss" -v n="$established" 'BEGIN {printf "%.2f", (p - b) / n}') |"
  fi
  after=$(counters)
  paste -d' ' <(echo "$COUNTERS" | tr ' ' '\n') <(echo "$counters_before" | tr ' ' '\n') <(echo "$after" | tr ' ' '\n') |
    awk 'NF == 3 { printf "| kernel counter %s during the run (TcpExt) | %d |\n", $1, $3 - $2 }'
  echo "| packets dropped for a full CPU backlog (/proc/net/softnet_stat) | $(( $(softnet_drops) - drops_before )) |"
  echo "| net.core.netdev_max_backlog | $(cat /proc/sys/net/core/netdev_max_backlog) |"
  echo "| server processes | $SERVERS |"
  echo "| elapsed (s) | $(( $(date +%s) - start )) |"
  if [ "$(( $(softnet_drops) - drops_before ))" -gt 0 ]; then
    echo
    echo "Packets were dropped for a full CPU input queue: their retransmissions can stall a slow"
    echo "download past the client's timeout. Run again with NETDEV_MAX_BACKLOG=16384 (see"
    echo "packaging/sysctl-ramjet-mirror.conf)."
  fi
} > "$OUT/report.md"
cat "$OUT/report.md"
