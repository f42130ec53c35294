#!/bin/bash
# A/B of 100 MB downloads over h2c and HTTP/1.1 between ramjet builds, alternating:
# one worker on CPU 0, `h2load -c 4 -m 1 -D 5` on CPU 1; prints per build and round the
# downloads, the server's CPU seconds, downloads per server CPU-second, and h2load's CPU.
#
#   bash bench/h2_download_ab.sh ROUNDS BINARY [BINARY ...]
#
# H2LOAD_ARGS adds h2load options to both protocols' runs, e.g. H2LOAD_ARGS="-f 256K" for a
# client that allows DATA frames of 256 KiB instead of the default 16 KiB (browsers and
# curl keep the default).
set -eu
R=$1; shift
W=/tmp/ramjet-bench/h2-ab
mkdir -p $W/www
[ -s $W/www/100m.bin ] || head -c 104857600 /dev/urandom > $W/www/100m.bin
cat > $W/r.toml <<CONF
listen = ["127.0.0.1:18556"]
workers = 1
[log]
access = "off"
[[location]]
root = "$W/www"
CONF
st() { awk '{print $14+$15}' /proc/$1/stat; }
for i in $(seq "$R"); do for b in "$@"; do
  taskset -c 0 "$b" serve --config $W/r.toml > /dev/null 2>&1 &
  P=$!
  for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:18556/100m.bin && break; sleep 0.1; done
  line="$(basename "$b")"
  for flag in "" --h1; do
    t0=$(st $P)
    out=$( { /usr/bin/time -f "CLI %U %S" taskset -c 1 h2load $flag ${H2LOAD_ARGS:-} -t 1 -c 4 -m 1 -D 5 http://127.0.0.1:18556/100m.bin; } 2>&1 )
    t1=$(st $P)
    n=$(echo "$out" | grep -oP 'requests: \d+ total, \d+ started, \d+ done, \K\d+')
    cli=$(echo "$out" | grep -oP 'CLI \K.*' | awk '{print $1+$2}')
    line="$line | ${flag:-h2c} n=$n server-cpu=$(python3 -c "print(round(($t1-$t0)/100,2))") per-server-cpu-s=$(python3 -c "print(round($n/(($t1-$t0)/100),1))") client-cpu=$cli"
  done
  kill $P; wait $P 2>/dev/null || true
  echo "$line"
done; done
