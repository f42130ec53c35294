cd /work/main
for r in 1 2 3; do
  for b in new old; do python3 bench/compare.py --out /tmp/s/c3-$b-$r --servers ramjet --profiles none --idle 0 --cold 8 --duration 8 --rounds 1 --ramjet /tmp/s/ramjet-$b >/dev/null 2>&1; echo "$r $b $(tail -n 1 /tmp/s/c3-$b-$r/*.md)"; done
  python3 bench/compare.py --out /tmp/s/c3-l-$r --servers lighttpd,nginx --profiles none --idle 0 --cold 8 --duration 8 --rounds 1 >/dev/null 2>&1; echo "$r peers"; tail -n 2 /tmp/s/c3-l-$r/*.md
done
