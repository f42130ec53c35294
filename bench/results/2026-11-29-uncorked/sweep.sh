#!/bin/bash
# bash sweep.sh VARIANT ...: per round (ROUNDS=3), lighttpd, then each variant, each measured by
# $D against the running server: D defaults to ../2026-11-29-static-3/discard-one.sh (4 discarding
# clients; COUNTERS="TcpRetransSegs TcpExtTCPOrigDataSent" counts data segments), D=copy-one.sh
# for 4 copying wrk clients. Servers on CPU 0 as bench/compare.py configures them (startsrv.py).
# VARIANT is ENV:BIN for ramjet (ENV settings joined by _, BIN a build of experiment.patch), or
# ENV:-FLAGS for bench/minhttpd.c built as /tmp/minhttpd-l (gcc -O2) serving 100m.bin with FLAGS
# (_ for spaces: -k CHUNK, -l LOWAT); NAGLE=1 was a one-line local edit that skipped TCP_NODELAY.
here=$(dirname "$0")
D=${D:-$here/../2026-11-29-static-3/discard-one.sh}
for round in $(seq 1 "${ROUNDS:-3}"); do
  SRV=lighttpd python3 "$here/startsrv.py" > /dev/null 2>&1 &
  sleep 1.5; lp=$(pgrep -f "lighttpd -D" | head -1)
  bash "$D" lighttpd "$lp" 18082; kill "$lp"; sleep 0.5
  for v in "$@"; do
    env=$(echo "$v" | cut -s -d: -f1 | tr '_' ' '); what=$(echo "$v" | cut -d: -f2)
    case $what in
      -*) env $env /tmp/minhttpd-l -p 18085 -c 0 -f /tmp/ramjet-bench/www/100m.bin $(echo "$what" | tr '_' ' ') 2>/dev/null &
          port=18085 ;;
      *) env $env taskset -c 0 "$what" serve --config /tmp/srv/ramjet/ramjet.toml > /dev/null 2>&1 &
         port=18080 ;;
    esac
    mp=$!; for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$port/ && break; sleep 0.1; done
    bash "$D" "[$v]" $mp $port
    kill $mp; wait $mp 2>/dev/null
  done
done
