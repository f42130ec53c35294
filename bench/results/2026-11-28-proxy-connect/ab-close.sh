#!/bin/bash
# A/B of two ramjet builds as the proxy to a closing backend, alternating rounds
cd /work/main
for r in $(seq ${ROUNDS:-5}); do
  for b in A B; do
    bin=$([ $b = A ] && echo $A || echo $B)
    python3 bench/proxy.py --out /tmp/abp/$b-$r --rounds 1 --duration ${DUR:-5} --proxies ramjet --ramjet $bin --backend minhttpd-close --profiles "${PROFILES:-proxied 100B c50,proxied 4KB c500}" >/dev/null 2>&1
    grep "| ramjet |" /tmp/abp/$b-$r/proxy.md | awk -F'|' -v b=$b -v r=$r '{print r, b, $2, $4, $5, $7}'
  done
done
