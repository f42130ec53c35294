# Sourced by cs.sh, pf.sh, sc.sh: start `$1` (ramjet or nginx) on CPU 0 with the
# configurations of ../2026-11-28-paced-call/, wait until it answers; sets $pid and $port.
# ramjet is $2, or $RAMJET.
D=$(cd "$(dirname "${BASH_SOURCE[0]}")/../2026-11-28-paced-call" && pwd)
which=$1; bin=${2:-${RAMJET:?a ramjet build}}
if [ "$which" = ramjet ]; then
  taskset -c 0 "$bin" serve --config $D/ramjet.toml >/tmp/xp-server.log 2>&1 & port=18190
else
  mkdir -p /tmp/xp-nginx
  taskset -c 0 nginx -c $D/nginx.conf -e /tmp/xp-nginx-error.log & port=18191
fi
pid=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$port/100.bin && break; sleep 0.1; done
