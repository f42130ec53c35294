# hot server ramjet on CPU 0; cold downloads from lighttpd pinned to CPU 1 (same CPU as the clients)
pkill -f "serve --config /tmp/s/r.toml"; sleep 0.5
printf 'listen = ["127.0.0.1:18080"]\nworkers = 1\n[log]\naccess = "off"\n[timeouts]\nkeepalive = "300s"\n[[location]]\nroot = "/tmp/ramjet-bench/www"\n' > /tmp/s/r.toml
printf 'server.document-root = "/tmp/ramjet-bench/www"\nserver.bind = "127.0.0.1"\nserver.port = 18090\nserver.network-backend = "sendfile"\n' > /tmp/s/l.conf
taskset -c 0 ${RAMJET:-target/release/ramjet} serve --config /tmp/s/r.toml 2>/dev/null & pid=$!
taskset -c 1 lighttpd -D -f /tmp/s/l.conf & lp=$!
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18080/100.bin && curl -s -o /dev/null http://127.0.0.1:18090/100.bin && break; sleep 0.1; done
taskset -c 1 wrk -t1 -c50 -d8s --latency http://127.0.0.1:18080/4k.bin | grep -E "Requests/sec|99%"
python3 -c "
import os,glob
for p in glob.glob('/tmp/ramjet-bench/www/cold/c*.bin'):
  fd=os.open(p,os.O_RDONLY);os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)"
for i in 0 1 2 3 4 5 6 7; do taskset -c 1 curl -s -o /dev/null --limit-rate 25M --max-time 11 http://127.0.0.1:${PORT:-18090}/cold/c$i.bin & done
sleep 1
taskset -c 1 wrk -t1 -c50 -d8s --latency http://127.0.0.1:18080/4k.bin | grep -E "Requests/sec|99%"
wait $(jobs -p | grep -v "^$pid$" | grep -v "^$lp$") 2>/dev/null
sleep 2
kill $pid $lp; wait 2>/dev/null
