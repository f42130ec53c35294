#!/bin/bash
# rounds.sh N [SECONDS]: N rounds of run.sh, each server in turn: ramjet (this tree's build),
# ramjet corked (BIN_CORKED, a build of ffe426c), lighttpd, nginx, h2o.
D=$(cd "$(dirname "$0")" && pwd)
for r in $(seq 1 "$1"); do
  "$D/run.sh" ramjet 18080 "ramjet-$r" "${2:-10}"
  [ -n "$BIN_CORKED" ] && BIN=$BIN_CORKED "$D/run.sh" ramjet 18080 "corked-$r" "${2:-10}"
  "$D/run.sh" lighttpd 18082 "lighttpd-$r" "${2:-10}"
  "$D/run.sh" nginx 18081 "nginx-$r" "${2:-10}"
  "$D/run.sh" h2o 18083 "h2o-$r" "${2:-10}"
done
