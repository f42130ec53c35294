#!/usr/bin/env python3
"""HTTPS: ramjet against nginx and h2o (Debian packages) in one run. Each server has one
worker pinned to CPU 0 and the same ECDSA P-256 certificate; the load runs on CPU 1.
Median of the rounds (servers alternate their order each round); requests per second,
requests per server-CPU-second (the server's process tree, /proc), p99 where the client
reports it.

Profiles:
  full handshake   h2load --h1, one request per connection, new connections at a fixed
                   rate (h2load does not resume sessions: every handshake is a full TLS 1.3
                   one, X25519 + ECDSA P-256)
  resumed          wrk -H "Connection: close": a new connection per request, resuming the
                   session of the one before (a TLS 1.3 ticket)
  4KB keep-alive   wrk -c 50, keep-alive
  100MB            wrk -c 4, the client decrypting everything (the server's CPU per
                   response is the figure to read)

    python3 bench/tls.py --rounds 3 --duration 5 --out bench/results/$(date +%F)-tls
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare  # noqa: E402
import procstat  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORK = compare.WORK / "tls"
WWW = WORK / "www"
PORTS = {"ramjet": 18443, "nginx": 18444, "h2o": 18445}
CLEAR = 18446  # ramjet's cleartext port, for its counters


def make_files():
    WWW.mkdir(parents=True, exist_ok=True)
    for name, size in [("4k.bin", 4096), ("100m.bin", 100 << 20)]:
        p = WWW / name
        if not p.exists() or p.stat().st_size != size:
            with open(p, "wb") as f:
                f.write(os.urandom(size))
    return procstat.self_signed_cert(WORK)


def server_cmd(name, conf, binary, cert, key):
    port = PORTS[name]
    if name == "ramjet":
        cfg = conf / "ramjet.toml"
        cfg.write_text(
            f'listen = [{{ address = "127.0.0.1:{port}", tls = {{ certificate = "{cert}", key = "{key}" }} }},'
            f' "127.0.0.1:{CLEAR}"]\nworkers = 1\n[log]\naccess = "off"\n'
            f'[timeouts]\nkeepalive = "300s"\nheader = "300s"\n'
            f'[[location]]\nroot = "{WWW}"\n[[location]]\npath = "/metrics"\nhandlers = ["metrics"]\n')
        return [binary, "serve", "--config", str(cfg)]
    if name == "nginx":
        cfg = conf / "nginx.conf"
        cfg.write_text(procstat.nginx_conf_head(conf) + f"""http {{
  access_log off;
  sendfile on; tcp_nopush on; tcp_nodelay on;
  open_file_cache max=10000 inactive=60s; open_file_cache_valid 60s;
  keepalive_requests 10000000; keepalive_timeout 300s;
  client_body_temp_path {conf}/nginx-body;
  include /etc/nginx/mime.types;
  ssl_protocols TLSv1.2 TLSv1.3;
  ssl_session_cache shared:SSL:10m;
  ssl_session_tickets on;
  # The suites in ramjet's order, the server's choice (as ramjet chooses).
  ssl_prefer_server_ciphers on;
  ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384;
  ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384;
  server {{
    listen 127.0.0.1:{port} ssl reuseport backlog=4096;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    root {WWW};
  }}
}}
""")
        return ["nginx", "-c", str(cfg), "-e", str(conf / "nginx-error.log")]
    if name == "h2o":
        cfg = conf / "h2o.conf"
        cfg.write_text(f"""listen:
  host: 127.0.0.1
  port: {port}
  ssl:
    certificate-file: {cert}
    key-file: {key}
    minimum-version: TLSv1.2
    cipher-preference: server
    cipher-suite: ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384
num-threads: 1
max-connections: 19000
http1-request-timeout: 300
error-log: {conf}/h2o-error.log
hosts:
  default:
    paths:
      /:
        file.dir: {WWW}
""")
        return ["h2o", "-c", str(cfg)]
    raise SystemExit(name)


# name, kind, path, connections
PROFILES = [
    ("full handshake, 1 request/connection", "h2load", "/4k.bin", 200),
    ("resumed handshake, 1 request/connection", "wrk-close", "/4k.bin", 10),
    ("4KB keep-alive c50", "wrk", "/4k.bin", 50),
    ("100MB x4", "wrk", "/100m.bin", 4),
]


def load(kind, port, path, conns, duration):
    url = f"https://127.0.0.1:{port}{path}"
    if kind == "h2load":
        # New connections at a fixed rate for `duration`; each makes one request.
        rate, period_ms = 200, 50  # 4000 connections/s offered
        total = rate * int(duration * 1000 / period_ms)
        cmd = ["taskset", "-c", "1", "h2load", "--h1", "-t", "1", "-c", str(total), "-n", str(total),
               "-r", str(rate), "--rate-period", f"{period_ms}ms", "-T", "30", url]
    else:
        cmd = ["taskset", "-c", "1", "wrk", "-t", "1", "-c", str(conns), "-d", f"{duration}s", "--latency"]
        if kind == "wrk-close":
            cmd += ["-H", "Connection: close"]
        cmd.append(url)
    out = compare.load_output(cmd, timeout=duration * 10 + 60)
    if kind == "h2load":
        m = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed", out)
        fin = re.search(r"finished in ([\d.]+)s", out)
        ok = int(m.group(3)) if m else 0
        secs = float(fin.group(1)) if fin else duration
        return {"requests": ok, "rps": ok / secs, "errors": int(m.group(4)) if m else -1, "p99_ms": None,
                "raw": out}
    r = compare.parse_wrk(out)
    r["errors"] = r["non2xx"] + r["socket_errors"]
    return r


def run(name, binary, profile, duration, cert, key):
    _title, kind, path, conns = profile
    conf = WORK / f"conf-{name}"
    conf.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["taskset", "-c", "0", *server_cmd(name, conf, binary, cert, key)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        procstat.wait_port(PORTS[name], proc)
        # Warm: the file in the page cache and in the server's caches.
        subprocess.run(["curl", "-sk", "-o", "/dev/null", f"https://127.0.0.1:{PORTS[name]}{path}"], check=True)
        cpu0 = procstat.tree_cpu([proc.pid])
        t0 = time.time()
        r = load(kind, PORTS[name], path, conns, duration)
        r["cpu_s"] = procstat.tree_cpu([proc.pid]) - cpu0
        r["wall_s"] = time.time() - t0
        r["per_cpu_s"] = r["requests"] / r["cpu_s"] if r["cpu_s"] > 0 else 0.0
        if name == "ramjet":
            m = subprocess.run(["curl", "-s", f"http://127.0.0.1:{CLEAR}/metrics"], capture_output=True,
                               text=True).stdout
            r["resumed"] = sum(int(l.split()[1]) for l in m.splitlines()
                               if l.startswith("ramjet_tls_handshakes_resumed_total"))
        return r
    finally:
        procstat.stop(proc)


def rss_kb(pid):
    """Resident KB of a process tree."""
    return procstat.tree_rss_kb(pid)


def idle_memory(name, binary, count, cert, key):
    """Hold `count` idle TLS keep-alive connections, each after one 4 KB request; the
    server's RSS growth per connection (KB)."""
    import socket
    import ssl
    conf = WORK / f"conf-{name}"
    conf.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["taskset", "-c", "0", *server_cmd(name, conf, binary, cert, key)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ctx = ssl.create_default_context(cafile=str(cert))
    ctx.check_hostname = False
    req = b"GET /4k.bin HTTP/1.1\r\nHost: localhost\r\n\r\n"

    def one():
        s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", PORTS[name])), server_hostname="localhost")
        s.sendall(req)
        got = b""
        while len(got) < 4096 or b"\r\n\r\n" not in got or len(got) < got.find(b"\r\n\r\n") + 4 + 4096:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("closed")
            got += chunk
        return s

    socks = []
    try:
        procstat.wait_port(PORTS[name], proc)
        for s in [one() for _ in range(200)]:
            s.close()
        time.sleep(1.0)
        base = rss_kb(proc.pid)
        for _ in range(count):
            socks.append(one())
        time.sleep(2.0)
        held = rss_kb(proc.pid)
        return {"connections": count, "rss_before_kb": base, "rss_held_kb": held,
                "kb_per_conn": (held - base) / count}
    finally:
        for s in socks:
            s.close()
        procstat.stop(proc)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ramjet", default=str(ROOT / "target/release/ramjet"))
    ap.add_argument("--servers", default="ramjet,nginx,h2o")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--profiles", default="all", help="comma list of profile numbers (1-based), or all")
    ap.add_argument("--idle", type=int, default=0,
                    help="only measure memory per idle TLS connection, holding this many")
    ap.add_argument("--flood", type=int, default=0,
                    help="only measure keep-alive p99 during a flood of handshakes, this many in flight")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    compare.raise_nofile()
    cert, key = make_files()
    servers = args.servers.split(",")
    if args.idle:
        return idle_report(servers, args, cert, key)
    if args.flood:
        return flood_report(servers, args, cert, key)
    profiles = PROFILES if args.profiles == "all" else [PROFILES[int(i) - 1] for i in args.profiles.split(",")]
    results = {p[0]: {s: [] for s in servers} for p in profiles}
    for rnd in range(args.rounds):
        order = servers[rnd % len(servers):] + servers[:rnd % len(servers)]
        for p in profiles:
            for s in order:
                r = run(s, args.ramjet, p, args.duration, cert, key)
                print(f"round {rnd + 1} {p[0]} {s}: {r['rps']:.0f} req/s, {r['per_cpu_s']:.0f} per CPU-s, "
                      f"errors {r['errors']}", flush=True)
                results[p[0]][s].append(r)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        "# HTTPS: ramjet, nginx and h2o", "",
        f"Command: `python3 bench/tls.py {' '.join(sys.argv[1:])}`", "",
        f"One worker each on CPU 0, the load on CPU 1; {args.rounds} rounds of {args.duration} s, median; "
        "TLS 1.3, ECDSA P-256 certificate, X25519. Versions: " + ", ".join(versions()), "",
        "| profile | server | req/s | req/server-CPU-s | vs nginx (per CPU) | p99 ms | errors | spread (per CPU) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in profiles:
        per = {}
        for s in servers:
            runs = results[p[0]][s]
            per[s] = statistics.median(r["per_cpu_s"] for r in runs)
        for s in servers:
            runs = results[p[0]][s]
            rps = statistics.median(r["rps"] for r in runs)
            p99 = [r["p99_ms"] for r in runs if r.get("p99_ms") is not None]
            vals = [r["per_cpu_s"] for r in runs]
            spread = (max(vals) - min(vals)) / per[s] * 100 if per[s] else 0
            ratio = per[s] / per["nginx"] if per.get("nginx") else 0
            lines.append(f"| {p[0]} | {s} | {rps:,.0f} | {per[s]:,.0f} | {ratio:.2f}x | "
                         f"{statistics.median(p99):.2f} | {sum(r['errors'] for r in runs)} | {spread:.0f}% |"
                         if p99 else
                         f"| {p[0]} | {s} | {rps:,.0f} | {per[s]:,.0f} | {ratio:.2f}x | - | "
                         f"{sum(r['errors'] for r in runs)} | {spread:.0f}% |")
    resumed = [r.get("resumed") for p in profiles if p[1] == "wrk-close" for r in results[p[0]].get("ramjet", [])]
    if resumed:
        lines += ["", f"ramjet's resumed handshakes in the resumed profile (its counter, per run): {resumed}"]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    (out / "raw.json").write_text(json.dumps(
        {k: {s: [{kk: vv for kk, vv in r.items() if kk != "raw"} for r in v] for s, v in d.items()}
         for k, d in results.items()}, indent=1))
    print("\n".join(lines))


def flood(name, binary, duration, cert, key, rate):
    """p99 of 10 keep-alive clients (4 KB) alone, then while new TLS connections arrive at
    `rate` per second (each one request): (alone, flooded, handshakes done in the flood)."""
    conf = WORK / f"conf-{name}"
    conf.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["taskset", "-c", "0", *server_cmd(name, conf, binary, cert, key)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"https://127.0.0.1:{PORTS[name]}/4k.bin"
    keepalive = ["taskset", "-c", "1", "wrk", "-t", "1", "-c", "10", "-d", f"{duration}s", "--latency", url]
    try:
        procstat.wait_port(PORTS[name], proc)
        alone = compare.parse_wrk(compare.load_output(keepalive))
        # Recorded ClientHellos, `rate` connections in flight: the server pays a full
        # handshake for each, the client nothing.
        h2 = subprocess.Popen(["taskset", "-c", "1", sys.executable, str(ROOT / "bench/hello_flood.py"),
                               str(PORTS[name]), str(duration + 2), str(rate)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        time.sleep(1.0)
        flooded = compare.parse_wrk(compare.load_output(keepalive))
        out = h2.communicate()[0]
        return alone, flooded, out
    finally:
        procstat.stop(proc)


def flood_report(servers, args, cert, key):
    rows = {s: [] for s in servers}
    for rnd in range(args.rounds):
        for s in servers:
            alone, flooded, answered = flood(s, args.ramjet, args.duration, cert, key, args.flood)

            print(f"round {rnd + 1} {s}: p99 alone {alone['p99_ms']} ms, under the flood {flooded['p99_ms']} ms "
                  f"({alone['rps']:.0f} -> {flooded['rps']:.0f} req/s; {answered.strip()} handshakes answered)",
                  flush=True)
            flooded["handshakes"] = int(answered.strip() or 0)
            rows[s].append((alone, flooded))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Keep-alive clients during a flood of new TLS connections", "",
             f"Command: `python3 bench/tls.py {' '.join(sys.argv[1:])}`", "",
             f"Each server alone on CPU 0 (one worker). `wrk -c 10` (4 KB, keep-alive, TLS) for {args.duration} s "
             f"alone, then again during a flood of handshakes (`bench/hello_flood.py`: {args.flood} connections in flight, "
             f"each sending a recorded ClientHello and leaving once the server's first flight is back, "
             f"for {args.duration + 2} s), both clients on CPU 1. Median of "
             f"{args.rounds}.", "",
             "| server | p99 alone ms | p99 under the flood ms | req/s alone | req/s under the flood | "
             "handshakes answered | runs (p99 flooded) |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for s in servers:
        a = statistics.median(r[0]["p99_ms"] for r in rows[s])
        f = statistics.median(r[1]["p99_ms"] for r in rows[s])
        ra = statistics.median(r[0]["rps"] for r in rows[s])
        rf = statistics.median(r[1]["rps"] for r in rows[s])
        runs = ", ".join(f"{r[1]['p99_ms']:.1f}" for r in rows[s])
        hs = statistics.median(r[1]["handshakes"] for r in rows[s])
        lines.append(f"| {s} | {a:.2f} | {f:.2f} | {ra:,.0f} | {rf:,.0f} | {hs:,.0f} | {runs} |")
    (out / "flood.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def idle_report(servers, args, cert, key):
    rows = {s: [] for s in servers}
    for rnd in range(args.rounds):
        for s in servers:
            r = idle_memory(s, args.ramjet, args.idle, cert, key)
            print(f"round {rnd + 1} {s}: {r['kb_per_conn']:.2f} KB per idle TLS connection", flush=True)
            rows[s].append(r)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Memory per idle TLS keep-alive connection", "",
             f"Command: `python3 bench/tls.py {' '.join(sys.argv[1:])}`", "",
             f"Each server alone on CPU 0; {args.idle} TLS 1.3 connections from Python's ssl, each after one "
             "4 KB request, held idle; growth of the server's resident memory (its process tree) divided by "
             f"the connections; median of {args.rounds}. Versions: " + ", ".join(versions()), "",
             "| server | KB per idle TLS connection | runs |", "|---|---:|---|"]
    for s in servers:
        v = [r["kb_per_conn"] for r in rows[s]]
        lines.append(f"| {s} | {statistics.median(v):.2f} | {', '.join(f'{x:.2f}' for x in v)} |")
    (out / "idle.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def versions():
    return procstat.tool_versions((["nginx", "-v"], ["h2o", "--version"], ["wrk", "--version"], ["h2load", "--version"]))


if __name__ == "__main__":
    main()
