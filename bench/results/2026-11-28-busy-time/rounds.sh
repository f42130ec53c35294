#!/bin/bash
# rounds of: meter (busy|cpu) x cap (none|4e9), 4 s each, xp build; prints req/s, hrtimer, trial lines
H=$(dirname "$0")/../2026-11-28-paced-call/hrt.sh
R=${ROUNDS:-5}
for r in $(seq $R); do
  for cap in none 4000000000; do
    for meter in busy cpu; do
      envs="XP_BIN=/tmp/ramjet-xp CLIENT=/tmp/ramjet-B"
      [ $cap != none ] && envs="$envs XP_MAXPACE=$cap"
      [ $meter = cpu ] && envs="$envs XP_CPU=1"
      out=$(env $envs bash $H 2>&1 | tr '\n' ' ')
      trials=$(grep "XP trial" /tmp/xp-server.log | awk '{print $NF}' | tr '\n' ',')
      ratios=$(grep "XP trial" /tmp/xp-server.log | awk '{print $(NF-2)}' | tr '\n' ',')
      echo "round $r cap $cap meter $meter | $out | trials $trials ratios $ratios"
    done
  done
done
