#!/bin/bash
# ab-rounds.sh N [SECONDS]: N rounds alternating this tree's ramjet and BIN_CORKED (a build of ffe426c).
D=$(cd "$(dirname "$0")" && pwd)
for r in $(seq 1 "$1"); do
  "$D/run.sh" ramjet 18080 "ramjet-ab-$r" "${2:-10}"
  BIN=$BIN_CORKED "$D/run.sh" ramjet 18080 "corked-ab-$r" "${2:-10}"
done
