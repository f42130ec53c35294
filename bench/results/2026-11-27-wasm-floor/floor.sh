#!/bin/bash
# Where one SPECweb99 dynamic GET's CPU time goes, native module against component, at full
# speed: one worker on CPU 0 (cg.toml), `ramjet bench -c 50` on CPU 1, `perf record` of the
# server for 4 s of each 6 s run, native and component alternating, ROUNDS rounds.
#   floor.sh [ROUNDS]        (needs /tmp/ramjet-bench/wasm: `python3 bench/wasm.py --rounds 1`)
# Prints, per run, requests/s and the µs per request spent in each part of the server:
# the kernel, wasmtime's own functions, the module's compiled code (JIT), ramjet's
# WebAssembly host (ramjet_wasm), libc, tokio, and the rest of ramjet.
ROUNDS=${1:-3}; BIN=${BIN:-/work/main/target/release/ramjet}
cd "$(dirname "$0")"
taskset -c 0 "$BIN" serve -c cg.toml > serve.log 2>&1 &
SRV=$!
for i in $(seq 1 100); do curl -s -o /dev/null http://127.0.0.1:18799/n/ && break; sleep 0.1; done
U="/file_set/dir00001/class1_3"
for m in n w; do taskset -c 1 "$BIN" bench -c 50 -d 2s "http://127.0.0.1:18799/s99$m?$U" >/dev/null 2>&1; done
for r in $(seq 1 "$ROUNDS"); do
  for m in n w; do
    taskset -c 1 "$BIN" bench -c 50 -d 6s "http://127.0.0.1:18799/s99$m?$U" > bench.txt 2>&1 &
    B=$!
    sleep 1
    perf record -q -e cpu-clock -F 4999 -p $SRV -o perf.data -- sleep 4 >/dev/null 2>&1
    wait $B
    RPS=$(awk '/Requests\/sec/ {print $2}' bench.txt)
    perf report -i perf.data --no-children --sort dso,sym 2>/dev/null | grep -v '^#' | grep -v '^$' |
      awk -v rps="$RPS" -v m="$m" -v r="$r" '{p=$1; sub("%","",p); l=$0; k="ramjet";
        if (l ~ /kernel/) k="kernel"; else if (l ~ /JIT/) k="jit";
        else if (l ~ /wasmtime|cranelift/) k="wasmtime"; else if (l ~ /ramjet_wasm/) k="ramjet_wasm";
        else if (l ~ /libc/) k="libc"; else if (l ~ /tokio/) k="tokio"; s[k]+=p}
        END {us=1e6/rps; printf "round %d %s req/s %.0f us/req %.2f", r, (m=="n"?"native   ":"component"), rps, us;
             n=split("kernel wasmtime jit ramjet_wasm libc tokio ramjet", ks, " ");
             for (i=1;i<=n;i++) printf " %s %.2f", ks[i], us*s[ks[i]]/100; printf "\n"}'
  done
done
kill $SRV; wait $SRV 2>/dev/null
rm -f perf.data perf.data.old bench.txt
