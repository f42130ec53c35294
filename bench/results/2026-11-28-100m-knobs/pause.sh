#!/bin/bash
# rounds alternating configurations of the xp-pause.patch build and nginx; 4 s of 100 MB x4
# discarding each. RAMJET=<a ramjet build for the load> XP_BIN=<deea759 + xp-pause.patch>
R=$(dirname "$0")/../2026-11-28-paced-call/run.sh
for r in $(seq ${ROUNDS:-5}); do
  for cfg in ${CFGS:-base p2m fixed2m p2mc nginx}; do
    case $cfg in
      base) e="";; fixed2m) e="XP_FIXED=2095456";;
      p2m) e="XP_FIXED=2095456 XP_PAUSE_BYTES=2095456 XP_PAUSE_US=1000";;
      p2mc) e="XP_PAUSE_BYTES=2095456 XP_PAUSE_US=1000";;
      p1m) e="XP_FIXED=1047728 XP_PAUSE_BYTES=1047728 XP_PAUSE_US=1000";;
      p8m) e="XP_FIXED=2095456 XP_PAUSE_BYTES=8000000 XP_PAUSE_US=1000";;
      s1000) e="XP_FIXED=2095456 XP_PAUSE_BYTES=2095456 XP_SPIN=1 XP_PAUSE_US=1000";;
      s2000) e="XP_FIXED=2095456 XP_PAUSE_BYTES=2095456 XP_SPIN=1 XP_PAUSE_US=2000";;
      s500) e="XP_FIXED=2095456 XP_PAUSE_BYTES=2095456 XP_SPIN=1 XP_PAUSE_US=500";;
      nginx) e="";;
    esac
    if [ $cfg = nginx ]; then out=$(CLIENT=$RAMJET DUR=4 bash $R nginx 2>&1 | tr '\n' ' ')
    else out=$(env $e CLIENT=$RAMJET DUR=4 bash $R ramjet $XP_BIN 2>&1 | tr '\n' ' '); fi
    echo "round $r $cfg | $out"
  done
done
