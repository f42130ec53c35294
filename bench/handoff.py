#!/usr/bin/env python3
"""The 2001 experiment, with a Rust backend: 30% of requests belong to a backend process,
70% are static files ramjet serves. Each request is its own connection (a hand-off gives
the connection away for good, so keep-alive would send every later request of it to the
backend). Variants, in the same run:

  proxy      ramjet proxies the backend's share over pooled HTTP connections
  single     ramjet hands each connection to the backend in a message of its own
             ([limits] handoff_batch = 1: one sendmsg per descriptor, the 2001 way)
  batched    ramjet hands them over in batches (handoff_batch = 64, the default)
  direct     no ramjet in the backend's path: clients connect to the backend for its 30%
             and to ramjet for the static 70% (the cost of serving the same requests
             without forwarding)

The backend is crates/handoff/examples/backend.rs (a thread per connection, answering a
short text); ramjet (1 worker) and the backend share CPU 0, the load (`ramjet bench -t1`)
is on CPU 1. Per variant, median of ROUNDS: requests/s, p99, CPU of ramjet and of the
backend per request (utime+stime from /proc), context switches per request (perf stat
over both processes).

    bench/handoff.py --out bench/results/$(date +%F)-handoff [--rounds 3] [--duration 5]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RAMJET = ROOT / "target/release/ramjet"
BACKEND = ROOT / "target/release/examples/backend"
PORT = 18810
BACKEND_PORT = 18811
TICK = os.sysconf("SC_CLK_TCK")
VARIANTS = ["proxy", "single", "batched", "direct"]


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def wait_port(port):
    import socket
    end = time.time() + 10
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def config(variant, work):
    www = work / "www"
    base = f'listen = ["127.0.0.1:{PORT}"]\nworkers = 1\n[log]\naccess = "off"\n'
    if variant == "single":
        base += "[limits]\nhandoff_batch = 1\n"
    if variant == "proxy":
        base += f'[upstream.app]\nservers = ["127.0.0.1:{BACKEND_PORT}"]\n'
    base += f'[[location]]\nroot = "{www}"\n'
    if variant == "proxy":
        base += '[[location]]\npath = "/app/"\nproxy = "app"\n'
    elif variant in ("single", "batched"):
        base += f'[[location]]\npath = "/app/"\nhandoff = "{work}/backend.sock"\n'
    path = work / f"{variant}.toml"
    path.write_text(base)
    return path


def urls(variant):
    static = f"http://127.0.0.1:{PORT}/4k.bin"
    app = (f"http://127.0.0.1:{BACKEND_PORT}/app/x" if variant == "direct"
           else f"http://127.0.0.1:{PORT}/app/x")
    # Round-robin per connection: 7 static, 3 for the backend.
    return [static] * 7 + [app] * 3


def run(variant, work, duration, connections):
    backend = subprocess.Popen(["taskset", "-c", "0", str(BACKEND), str(work / "backend.sock"),
                                f"127.0.0.1:{BACKEND_PORT}"], stdout=subprocess.DEVNULL)
    ramjet = subprocess.Popen(["taskset", "-c", "0", str(RAMJET), "serve", "--config",
                               str(config(variant, work))], stderr=subprocess.DEVNULL)
    try:
        wait_port(PORT)
        wait_port(BACKEND_PORT)
        load = ["taskset", "-c", "1", str(RAMJET), "bench", "-t1", "-c", str(connections),
                "--no-keepalive", "--json", "--no-progress"]
        subprocess.run(load + ["-d", "1s"] + urls(variant), capture_output=True)  # warm-up
        cpu0 = (cpu_seconds(ramjet.pid), cpu_seconds(backend.pid))
        perf = subprocess.Popen(["perf", "stat", "-x,", "-e", "context-switches", "-p",
                                 f"{ramjet.pid},{backend.pid}"],
                                stderr=subprocess.PIPE, text=True)
        out = subprocess.run(load + ["-d", f"{duration}s"] + urls(variant),
                             capture_output=True, text=True).stdout
        perf.send_signal(2)
        switches = int(perf.communicate()[1].strip().splitlines()[-1].split(",")[0])
        cpu1 = (cpu_seconds(ramjet.pid), cpu_seconds(backend.pid))
        r = json.loads(out)
        n = r["responses"]
        return {
            "rps": r["requests_per_sec"],
            "p99_ms": r["latency_ms"]["p99"],
            "errors": r["errors"]["total"],
            "ramjet_us": (cpu1[0] - cpu0[0]) / n * 1e6,
            "backend_us": (cpu1[1] - cpu0[1]) / n * 1e6,
            "switches": switches / n,
        }
    finally:
        for p in (ramjet, backend):
            p.terminate()
            p.wait()
        (work / "backend.sock").unlink(missing_ok=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--connections", type=int, default=50)
    args = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "ramjet", "-p", "ramjet-handoff",
                    "--example", "backend", "--bin", "ramjet"], cwd=ROOT, check=True)
    work = Path(tempfile.mkdtemp(prefix="ramjet-handoff-"))
    (work / "www").mkdir()
    (work / "www/4k.bin").write_bytes(os.urandom(4096))
    runs = {v: [] for v in VARIANTS}
    for rnd in range(args.rounds):
        for v in VARIANTS[rnd % len(VARIANTS):] + VARIANTS[:rnd % len(VARIANTS)]:
            r = run(v, work, args.duration, args.connections)
            runs[v].append(r)
            print(f"round {rnd} {v:8} {r['rps']:>10,.0f} req/s  p99 {r['p99_ms']:.2f} ms  "
                  f"ramjet {r['ramjet_us']:.1f} us/req  backend {r['backend_us']:.1f} us/req  "
                  f"{r['switches']:.2f} switches/req  errors {r['errors']}", flush=True)
    med = {v: {k: statistics.median(r[k] for r in runs[v]) for k in runs[v][0]} for v in VARIANTS}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# Hand-off vs proxy vs direct — {time.strftime('%Y-%m-%d %H:%M')}", "",
             "Command: `" + " ".join(sys.argv) + "`", "", __doc__.split("\n\n    bench/")[0], "",
             "CPU columns are per request of the whole mix. *ramjet per forwarded request* is what",
             "forwarding the backend's 30% adds to ramjet: (ramjet µs/req − direct's) / 0.3.", "",
             "| variant | req/s | p99 ms | ramjet CPU µs/req | ramjet per forwarded request µs | backend CPU µs/req | both µs/req | context switches/req | errors |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    base = med["direct"]["ramjet_us"]
    for v in VARIANTS:
        m = med[v]
        fwd = "-" if v == "direct" else f"{(m['ramjet_us'] - base) / 0.3:.1f}"
        lines.append(f"| {v} | {m['rps']:,.0f} | {m['p99_ms']:.2f} | {m['ramjet_us']:.1f} | {fwd} | "
                     f"{m['backend_us']:.1f} | {m['ramjet_us'] + m['backend_us']:.1f} | "
                     f"{m['switches']:.2f} | {m['errors']:.0f} |")
    lines += ["", "All runs (req/s): " + "; ".join(
        f"{v} " + ", ".join(f"{r['rps']:,.0f}" for r in runs[v]) for v in VARIANTS), ""]
    (out / "report.md").write_text("\n".join(lines))
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
