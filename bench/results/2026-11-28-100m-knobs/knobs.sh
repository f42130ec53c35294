#!/bin/bash
# rounds alternating configs; 4 s of 100 MB x4 discarding each; prints req/s and server ticks
R=$(dirname "$0")/../2026-11-28-paced-call/run.sh
for r in $(seq ${ROUNDS:-5}); do
  for cfg in ${CFGS:-base fixed2m cork fixed2m+cork nginx}; do
    case $cfg in
      base) e="";; fixed1m) e="XP_FIXED=1047728";; fixed2m) e="XP_FIXED=2095456";;
      yield8m) e="XP_YIELD=8388608";; cork) e="XP_CORK=1";; fixed2m+cork) e="XP_FIXED=2095456 XP_CORK=1";; fixed2m+yield8m) e="XP_FIXED=2095456 XP_YIELD=8388608";; nginx) e="";;
    esac
    if [ $cfg = nginx ]; then out=$(CLIENT=${RAMJET:?a ramjet build for the load} DUR=4 bash $R nginx 2>&1 | tr '\n' ' ')
    else out=$(env $e CLIENT=${RAMJET:?a ramjet build for the load} DUR=4 bash $R ramjet ${XP_BIN:?the build with xp-knobs.patch} 2>&1 | tr '\n' ' '); fi
    echo "round $r $cfg | $out"
  done
done
