#!/usr/bin/env python3
"""The 2001 experiment: 30% of requests belong to a backend process, 70% are static
files ramjet serves. The backend is Rust (`--backend rust`, the default) or a stock Apache
2.4 (`--backend apache`: event MPM, 2 processes of 64 threads, receiving hand-offs with
integrations/apache/mod_ramjet_handoff.c, its share a 4 KB file it serves itself). By
default each request is its own connection. With `--per-connection N` the clients keep
connections alive for N requests, all for the same side (a hand-off gives the connection
away for good, so every later request of it goes to the backend), the last asking to close;
connections take the sides in turn, 7 static then 3 for the backend. Variants, in the same
run:

  proxy      ramjet proxies the backend's share over pooled HTTP connections
  single     ramjet hands each connection to the backend in a message of its own
             ([limits] handoff_batch = 1: one sendmsg per descriptor, the 2001 way)
  batched    ramjet hands them over in batches (handoff_batch = 64, the default)
  direct     no ramjet in the backend's path: clients connect to the backend for its 30%
             and to ramjet for the static 70% (the cost of serving the same requests
             without forwarding)
  alone      (Apache only) Apache serves everything, the static 70% too

The Rust backend is crates/handoff/examples/backend.rs (a thread per connection,
answering a short text). ramjet (1 worker) and the backend share CPU 0, the load
(`ramjet bench -t1`) is on CPU 1. Per variant, median of ROUNDS: requests/s, p99, CPU of
ramjet and of the backend per request (utime+stime from /proc; for Apache its parent,
its children and the children it reaped), context switches per request (perf stat over
every process).

    bench/handoff.py --out bench/results/$(date +%F)-handoff [--backend apache] [--rounds 3] [--duration 5] [--per-connection N]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procstat import wait_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RAMJET = ROOT / "target/release/ramjet"
BACKEND = ROOT / "target/release/examples/backend"
PORT = 18810
BACKEND_PORT = 18811
TICK = os.sysconf("SC_CLK_TCK")
VARIANTS = ["proxy", "single", "batched", "direct"]
APACHE_VARIANTS = VARIANTS + ["alone"]
MODULE = ROOT / "integrations/apache/.libs/mod_ramjet_handoff.so"


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def family(pid):
    """pid and its live children."""
    out = [pid]
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, ValueError, IndexError):
                pass
    return out


def family_cpu(pid):
    """CPU of a process, its live children and the children it reaped."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    total = (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / TICK
    return total + sum(cpu_seconds(c) for c in family(pid)[1:])


def apache_conf(work):
    m = "/usr/lib/apache2/modules"
    user = "User www-data\nGroup www-data\n" if os.geteuid() == 0 else ""
    conf = work / "httpd.conf"
    conf.write_text(
        f'ServerRoot "{work}"\nListen 127.0.0.1:{BACKEND_PORT}\nServerName localhost\n{user}'
        f'PidFile {work}/httpd.pid\nErrorLog {work}/error.log\nLogLevel warn\n'
        f"LoadModule mpm_event_module {m}/mod_mpm_event.so\n"
        f"LoadModule authz_core_module {m}/mod_authz_core.so\n"
        f"LoadModule mime_module {m}/mod_mime.so\nLoadModule alias_module {m}/mod_alias.so\n"
        f"LoadModule ramjet_handoff_module {MODULE}\nRamjetHandoffSocket {work}/backend.sock\n"
        f'TypesConfig /etc/mime.types\nDocumentRoot "{work}/www"\nAlias /app/ "{work}/app/"\n'
        f'<Directory "{work}">\n  Require all granted\n</Directory>\n'
        "KeepAlive On\nStartServers 2\nServerLimit 2\nThreadsPerChild 64\n"
        "MaxRequestWorkers 128\nMinSpareThreads 1\nMaxSpareThreads 128\n")
    return conf


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
    static = (f"http://127.0.0.1:{BACKEND_PORT}/4k.bin" if variant == "alone"
              else f"http://127.0.0.1:{PORT}/4k.bin")
    app = (f"http://127.0.0.1:{BACKEND_PORT}/app/x" if variant in ("direct", "alone")
           else f"http://127.0.0.1:{PORT}/app/x")
    # Round-robin per connection: 7 static, 3 for the backend.
    return [static] * 7 + [app] * 3


def run(variant, work, duration, connections, apache, per_connection):
    if apache:
        backend = subprocess.Popen(["taskset", "-c", "0", "/usr/sbin/apache2", "-f",
                                    str(apache_conf(work)), "-DFOREGROUND"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
    else:
        backend = subprocess.Popen(["taskset", "-c", "0", str(BACKEND), str(work / "backend.sock"),
                                    f"127.0.0.1:{BACKEND_PORT}"], stdout=subprocess.DEVNULL)
    ramjet = subprocess.Popen(["taskset", "-c", "0", str(RAMJET), "serve", "--config",
                               str(config(variant, work))], stderr=subprocess.DEVNULL)
    backend_cpu = family_cpu if apache else cpu_seconds
    try:
        wait_port(PORT)
        wait_port(BACKEND_PORT)
        load = ["taskset", "-c", "1", str(RAMJET), "bench", "-t1", "-c", str(connections),
                "--json", "--no-progress"]
        load += (["--requests-per-connection", str(per_connection)] if per_connection
                 else ["--no-keepalive"])
        subprocess.run(load + ["-d", "1s"] + urls(variant), capture_output=True)  # warm-up
        cpu0 = (cpu_seconds(ramjet.pid), backend_cpu(backend.pid))
        pids = [ramjet.pid] + (family(backend.pid) if apache else [backend.pid])
        perf = subprocess.Popen(["perf", "stat", "-x,", "-e", "context-switches", "-p",
                                 ",".join(map(str, pids))],
                                stderr=subprocess.PIPE, text=True)
        out = subprocess.run(load + ["-d", f"{duration}s"] + urls(variant),
                             capture_output=True, text=True).stdout
        perf.send_signal(2)
        switches = int(perf.communicate()[1].strip().splitlines()[-1].split(",")[0])
        cpu1 = (cpu_seconds(ramjet.pid), backend_cpu(backend.pid))
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
    ap.add_argument("--backend", choices=["rust", "apache"], default="rust")
    ap.add_argument("--per-connection", type=int, default=0,
                    help="keep-alive connections of N requests (default: one per connection)")
    args = ap.parse_args()
    apache = args.backend == "apache"
    variants = APACHE_VARIANTS if apache else VARIANTS
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "ramjet", "-p", "ramjet-handoff",
                    "--example", "backend", "--bin", "ramjet"], cwd=ROOT, check=True)
    if apache:
        subprocess.run(["make", "-s", "-C", str(ROOT / "integrations/apache")], check=True,
                       stdout=subprocess.DEVNULL)
    work = Path(tempfile.mkdtemp(prefix="ramjet-handoff-"))
    os.chmod(work, 0o755)
    for d in ("www", "app"):
        (work / d).mkdir()
        os.chmod(work / d, 0o755)
    (work / "www/4k.bin").write_bytes(os.urandom(4096))
    (work / "app/x").write_bytes(os.urandom(4096))
    for f in ("www/4k.bin", "app/x"):
        os.chmod(work / f, 0o644)
    runs = {v: [] for v in variants}
    for rnd in range(args.rounds):
        for v in variants[rnd % len(variants):] + variants[:rnd % len(variants)]:
            r = run(v, work, args.duration, args.connections, apache, args.per_connection)
            runs[v].append(r)
            print(f"round {rnd} {v:8} {r['rps']:>10,.0f} req/s  p99 {r['p99_ms']:.2f} ms  "
                  f"ramjet {r['ramjet_us']:.1f} us/req  backend {r['backend_us']:.1f} us/req  "
                  f"{r['switches']:.2f} switches/req  errors {r['errors']}", flush=True)
    med = {v: {k: statistics.median(r[k] for r in runs[v]) for k in runs[v][0]} for v in variants}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# Hand-off vs proxy vs direct ({args.backend} backend) — {time.strftime('%Y-%m-%d %H:%M')}", "",
             "Command: `" + " ".join(sys.argv) + "`", "", __doc__.split("\n\n    bench/")[0], "",
             "Connections in this run: " + (f"keep-alive, {args.per_connection} requests each"
                                            if args.per_connection else "one request each"), "",
             "CPU columns are per request of the whole mix. *ramjet per forwarded request* is what",
             "forwarding the backend's 30% adds to ramjet: (ramjet µs/req − direct's) / 0.3.", "",
             "| variant | req/s | p99 ms | ramjet CPU µs/req | ramjet per forwarded request µs | backend CPU µs/req | both µs/req | context switches/req | errors |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    base = med["direct"]["ramjet_us"]
    for v in variants:
        m = med[v]
        fwd = "-" if v in ("direct", "alone") else f"{(m['ramjet_us'] - base) / 0.3:.1f}"
        lines.append(f"| {v} | {m['rps']:,.0f} | {m['p99_ms']:.2f} | {m['ramjet_us']:.1f} | {fwd} | "
                     f"{m['backend_us']:.1f} | {m['ramjet_us'] + m['backend_us']:.1f} | "
                     f"{m['switches']:.2f} | {m['errors']:.0f} |")
    lines += ["", "All runs (req/s): " + "; ".join(
        f"{v} " + ", ".join(f"{r['rps']:,.0f}" for r in runs[v]) for v in variants), ""]
    (out / "report.md").write_text("\n".join(lines))
    (out / "runs.json").write_text(json.dumps(runs, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
