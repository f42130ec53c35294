#!/usr/bin/env python3
"""HTTP/2: ramjet against h2o and nginx (Debian packages) in one run. Each server has one
worker pinned to CPU 0, a TLS listener (ALPN h2, the same ECDSA P-256 certificate) and a
cleartext one (h2c by prior knowledge); h2load runs on CPU 1. Median of the rounds
(servers alternate their order each round); requests per second and per server-CPU-second
(the server's process tree, /proc); h2load's mean and max request time (it reports no
percentiles).

Profiles:
  6B TLS -m 10      h2load -c 10 -m 10 over TLS (ALPN h2), a 6-byte file
  6B h2c -m 10      the same over cleartext, prior knowledge
  100MB h2c         h2load -c 4 -m 1, a 100 MB file; ramjet also serves it over HTTP/1.1
                    (h2load --h1) in the same round, for the h2c/HTTP/1.1 ratio

    python3 bench/h2.py --rounds 3 --duration 5 --out bench/results/$(date +%F)-h2
    python3 bench/h2.py --idle 2000 --out DIR      # memory per idle h2c connection
    python3 bench/h2.py --flood reset --out DIR    # ramjet bench --h2 p99 alone, then under
                                                   # a flood (bench/h2_flood.py: reset, ping, ...)
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
WORK = compare.WORK / "h2"
WWW = WORK / "www"
TLS_PORTS = {"ramjet": 18543, "nginx": 18544, "h2o": 18545}
CLEAR_PORTS = {"ramjet": 18553, "nginx": 18554, "h2o": 18555}


def make_files():
    WWW.mkdir(parents=True, exist_ok=True)
    (WWW / "6b.txt").write_bytes(b"hello\n")
    p = WWW / "100m.bin"
    if not p.exists() or p.stat().st_size != 100 << 20:
        with open(p, "wb") as f:
            f.write(os.urandom(100 << 20))
    return procstat.self_signed_cert(WORK)


def server_cmd(name, conf, binary, cert, key):
    tls, clear = TLS_PORTS[name], CLEAR_PORTS[name]
    if name == "ramjet":
        cfg = conf / "ramjet.toml"
        cfg.write_text(
            f'listen = [{{ address = "127.0.0.1:{tls}", tls = {{ certificate = "{cert}", key = "{key}" }} }},'
            f' "127.0.0.1:{clear}"]\nworkers = 1\n[log]\naccess = "off"\n'
            f'[timeouts]\nkeepalive = "300s"\nheader = "300s"\n'
            f'[[location]]\nroot = "{WWW}"\n')
        return [binary, "serve", "--config", str(cfg)]
    if name == "nginx":
        cfg = conf / "nginx.conf"
        cfg.write_text(procstat.nginx_conf_head(conf) + f"""http {{
  access_log off;
  sendfile on; tcp_nopush on; tcp_nodelay on;
  open_file_cache max=10000 inactive=60s; open_file_cache_valid 60s;
  keepalive_requests 10000000; keepalive_timeout 300s;
  http2_max_requests 10000000;
  client_body_temp_path {conf}/nginx-body;
  include /etc/nginx/mime.types;
  ssl_protocols TLSv1.2 TLSv1.3;
  ssl_prefer_server_ciphers on;
  ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384;
  server {{
    listen 127.0.0.1:{tls} ssl http2 reuseport backlog=4096;
    listen 127.0.0.1:{clear} http2 reuseport backlog=4096;
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
  port: {tls}
  ssl:
    certificate-file: {cert}
    key-file: {key}
    minimum-version: TLSv1.2
    cipher-preference: server
listen:
  host: 127.0.0.1
  port: {clear}
num-threads: 1
max-connections: 19000
http1-request-timeout: 300
http2-idle-timeout: 300
error-log: {conf}/h2o-error.log
hosts:
  default:
    paths:
      /:
        file.dir: {WWW}
""")
        return ["h2o", "-c", str(cfg)]
    raise SystemExit(name)


# title, scheme, path, connections, streams per connection, HTTP/1.1
PROFILES = [
    ("6B TLS -m 10", "https", "/6b.txt", 10, 10, False),
    ("6B h2c -m 10", "http", "/6b.txt", 10, 10, False),
    ("100MB h2c -c 4", "http", "/100m.bin", 4, 1, False),
]
H1_100MB = ("100MB HTTP/1.1 -c 4", "http", "/100m.bin", 4, 1, True)


def load(profile, name, duration):
    _t, scheme, path, conns, streams, h1 = profile
    port = TLS_PORTS[name] if scheme == "https" else CLEAR_PORTS[name]
    url = f"{scheme}://127.0.0.1:{port}{path}"
    cmd = ["taskset", "-c", "1", "h2load", "-t", "1", "-c", str(conns), "-m", str(streams),
           "-D", str(duration), url]
    if h1:
        cmd.insert(4, "--h1")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration * 10 + 120).stdout
    m = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                  r"(\d+) errored", out)
    fin = re.search(r"finished in ([\d.]+)s", out)
    t = re.search(r"time for request:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)", out)
    proto = re.search(r"Application protocol: (\S+)", out)

    def ms(v, u):
        return float(v) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[u]

    ok = int(m.group(3)) if m else 0
    secs = float(fin.group(1)) if fin else duration
    return {"requests": ok, "rps": ok / secs if secs else 0, "errors": (int(m.group(4)) + int(m.group(5))) if m else -1,
            "mean_ms": ms(t.group(5), t.group(6)) if t else None, "max_ms": ms(t.group(3), t.group(4)) if t else None,
            "protocol": proto.group(1) if proto else "?", "raw": out}


def run(name, binary, profile, duration, cert, key):
    conf = WORK / f"conf-{name}"
    conf.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["taskset", "-c", "0", *server_cmd(name, conf, binary, cert, key)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        procstat.wait_port(TLS_PORTS[name], proc)
        procstat.wait_port(CLEAR_PORTS[name], proc)
        subprocess.run(["curl", "-s", "--http2-prior-knowledge", "-o", "/dev/null", f"http://127.0.0.1:{CLEAR_PORTS[name]}{profile[2]}"],
                       check=True)
        cpu0 = procstat.tree_cpu([proc.pid])
        r = load(profile, name, duration)
        r["cpu_s"] = procstat.tree_cpu([proc.pid]) - cpu0
        r["per_cpu_s"] = r["requests"] / r["cpu_s"] if r["cpu_s"] > 0 else 0.0
        return r
    finally:
        procstat.stop(proc)


def versions():
    return procstat.tool_versions((["nginx", "-v"], ["h2o", "--version"], ["h2load", "--version"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ramjet", default=str(ROOT / "target/release/ramjet"))
    ap.add_argument("--servers", default="ramjet,h2o,nginx")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--profiles", default="all", help="comma list of profile numbers (1-based), or all")
    ap.add_argument("--idle", type=int, default=0, help="only memory per idle h2c connection, holding this many")
    ap.add_argument("--flood", default="", help="only p99 under this flood (bench/h2_flood.py kinds)")
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
    runs = [(p, s) for p in profiles for s in servers]
    if any(p[2] == "/100m.bin" for p in profiles) and "ramjet" in servers:
        runs.append((H1_100MB, "ramjet"))
    results = {}
    for rnd in range(args.rounds):
        order = runs[rnd % len(runs):] + runs[:rnd % len(runs)]
        for p, s in order:
            r = run(s, args.ramjet, p, args.duration, cert, key)
            print(f"round {rnd + 1} {p[0]} {s}: {r['rps']:.0f} req/s, {r['per_cpu_s']:.0f} per CPU-s, "
                  f"{r['protocol']}, errors {r['errors']}", flush=True)
            results.setdefault(p[0], {}).setdefault(s, []).append(r)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        "# HTTP/2: ramjet, h2o and nginx", "",
        f"Command: `python3 bench/h2.py {' '.join(sys.argv[1:])}`", "",
        f"One worker each on CPU 0, h2load on CPU 1; {args.rounds} rounds of {args.duration} s "
        "(the file fetched once first), median. Versions: " + ", ".join(versions()), "",
        "| profile | server | protocol | req/s | req/server-CPU-s | vs h2o (per CPU) | mean ms | max ms | errors | spread (per CPU) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for title, by_server in results.items():
        per = {s: statistics.median(r["per_cpu_s"] for r in rs) for s, rs in by_server.items()}
        for s, rs in by_server.items():
            vals = [r["per_cpu_s"] for r in rs]
            spread = (max(vals) - min(vals)) / per[s] * 100 if per[s] else 0
            ratio = f"{per[s] / per['h2o']:.2f}x" if per.get("h2o") else "-"
            mean = statistics.median(r["mean_ms"] for r in rs if r["mean_ms"] is not None) if rs[0]["mean_ms"] else 0
            mx = max((r["max_ms"] or 0) for r in rs)
            lines.append(f"| {title} | {s} | {rs[0]['protocol']} | {statistics.median(r['rps'] for r in rs):,.0f} | "
                         f"{per[s]:,.0f} | {ratio} | {mean:.2f} | {mx:.1f} | {sum(r['errors'] for r in rs)} | "
                         f"{spread:.0f}% |")
    h2c = results.get("100MB h2c -c 4", {}).get("ramjet")
    h1 = results.get(H1_100MB[0], {}).get("ramjet")
    if h2c and h1:
        a = statistics.median(r["per_cpu_s"] for r in h2c)
        b = statistics.median(r["per_cpu_s"] for r in h1)
        lines += ["", f"ramjet 100 MB over h2c against HTTP/1.1, per server CPU-second: {a:.2f} / {b:.2f} = "
                      f"{a / b:.2f}x"]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    (out / "raw.json").write_text(json.dumps(
        {k: {s: [{kk: vv for kk, vv in r.items() if kk != "raw"} for r in v] for s, v in d.items()}
         for k, d in results.items()}, indent=1))
    print("\n".join(lines))


def rss_kb(pid):
    """Resident KB of a process tree."""
    return procstat.tree_rss_kb(pid)


def h2c_request(port):
    """A cleartext HTTP/2 connection after one answered request for the 6-byte file."""
    import socket
    s = socket.create_connection(("127.0.0.1", port))
    path = b"/6b.txt"
    block = bytes([0x82, 0x86, 0x04, len(path)]) + path + bytes([0x01, 9]) + b"localhost"

    def frame(kind, flags, stream, payload=b""):
        n = len(payload)
        return bytes([n >> 16 & 255, n >> 8 & 255, n & 255, kind, flags]) + stream.to_bytes(4, "big") + payload

    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0) + frame(1, 0x5, 1, block))
    buf = b""
    i, done = 0, False
    while True:
        got = s.recv(65536)
        if not got:
            raise RuntimeError("closed")
        buf += got
        # Walk the frames not walked yet: done at DATA with END_STREAM on stream 1.
        while i + 9 <= len(buf):
            n = int.from_bytes(buf[i:i + 3], "big")
            if i + 9 + n > len(buf):
                break
            kind, flags, sid = buf[i + 3], buf[i + 4], int.from_bytes(buf[i + 5:i + 9], "big")
            if kind == 4 and not flags & 1:
                s.sendall(frame(4, 1, 0))
            if sid == 1 and kind in (0, 1) and flags & 1:
                done = True
            i += 9 + n
        if done:
            return s


def idle_memory(name, binary, count, cert, key):
    conf = WORK / f"conf-{name}"
    conf.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["taskset", "-c", "0", *server_cmd(name, conf, binary, cert, key)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    socks = []
    try:
        procstat.wait_port(CLEAR_PORTS[name], proc)
        for s in [h2c_request(CLEAR_PORTS[name]) for _ in range(200)]:
            s.close()
        time.sleep(1.0)
        base = rss_kb(proc.pid)
        for _ in range(count):
            socks.append(h2c_request(CLEAR_PORTS[name]))
        time.sleep(2.0)
        held = rss_kb(proc.pid)
        return {"kb_per_conn": (held - base) / count}
    finally:
        for s in socks:
            s.close()
        procstat.stop(proc)


def idle_report(servers, args, cert, key):
    rows = {s: [] for s in servers}
    for rnd in range(args.rounds):
        for s in servers:
            r = idle_memory(s, args.ramjet, args.idle, cert, key)
            print(f"round {rnd + 1} {s}: {r['kb_per_conn']:.2f} KB per idle h2c connection", flush=True)
            rows[s].append(r["kb_per_conn"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Memory per idle HTTP/2 connection", "",
             f"Command: `python3 bench/h2.py {' '.join(sys.argv[1:])}`", "",
             f"Each server alone on CPU 0; {args.idle} cleartext HTTP/2 connections (prior knowledge), each "
             "after one request for a 6-byte file, held idle; growth of the server's resident memory divided "
             f"by the connections; median of {args.rounds}. Versions: " + ", ".join(versions()), "",
             "| server | KB per idle h2c connection | runs |", "|---|---:|---|"]
    for s in servers:
        lines.append(f"| {s} | {statistics.median(rows[s]):.2f} | {', '.join(f'{x:.2f}' for x in rows[s])} |")
    (out / "idle.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def ramjet_bench(binary, port, seconds):
    out = subprocess.run(["taskset", "-c", "1", binary, "bench", "--h2", "-c", "10", "--pipeline", "1", "-d",
                          f"{seconds}s", "--json", f"http://127.0.0.1:{port}/6b.txt"],
                         capture_output=True, text=True, timeout=seconds * 10 + 60).stdout
    v = json.loads(out)
    return {"rps": v["requests_per_sec"], "p99_ms": v["latency_ms"]["p99"], "errors": v["errors"]["total"]}


def flood_report(servers, args, cert, key):
    rows = {s: [] for s in servers}
    for rnd in range(args.rounds):
        for name in servers:
            conf = WORK / f"conf-{name}"
            conf.mkdir(parents=True, exist_ok=True)
            proc = subprocess.Popen(["taskset", "-c", "0", *server_cmd(name, conf, args.ramjet, cert, key)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                port = CLEAR_PORTS[name]
                procstat.wait_port(port, proc)
                alone = ramjet_bench(args.ramjet, port, args.duration)
                att = subprocess.Popen(["taskset", "-c", "1", sys.executable, str(ROOT / "bench/h2_flood.py"),
                                        str(port), str(args.duration + 2), args.flood],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                time.sleep(1.0)
                flooded = ramjet_bench(args.ramjet, port, args.duration)
                opened, closed = att.communicate()[0].split()
                flooded["attacks"] = f"{closed}/{opened}"
                print(f"round {rnd + 1} {name}: p99 alone {alone['p99_ms']:.2f} ms, flooded {flooded['p99_ms']:.2f} ms "
                      f"({alone['rps']:.0f} -> {flooded['rps']:.0f} req/s; attacker connections closed/opened "
                      f"{closed}/{opened})", flush=True)
                rows[name].append((alone, flooded))
            finally:
                procstat.stop(proc)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# HTTP/2 clients during a {args.flood} flood", "",
             f"Command: `python3 bench/h2.py {' '.join(sys.argv[1:])}`", "",
             f"Each server alone on CPU 0. `ramjet bench --h2 -c 10 --pipeline 1` (6-byte file) for "
             f"{args.duration} s alone, then again while `bench/h2_flood.py` (2 attacker connections, "
             f"reconnecting {'as soon as a GOAWAY arrives' if '+leave' in args.flood else 'whenever closed'}) "
             f"sends a {args.flood} flood, all clients on CPU 1. Median of "
             f"{args.rounds}.", "",
             "| server | p99 alone ms | p99 flooded ms | req/s alone | req/s flooded | errors | attacker connections closed/opened (per run) |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for s in servers:
        a = statistics.median(r[0]["p99_ms"] for r in rows[s])
        f = statistics.median(r[1]["p99_ms"] for r in rows[s])
        ra = statistics.median(r[0]["rps"] for r in rows[s])
        rf = statistics.median(r[1]["rps"] for r in rows[s])
        errs = sum(r[0]["errors"] + r[1]["errors"] for r in rows[s])
        lines.append(f"| {s} | {a:.2f} | {f:.2f} | {ra:,.0f} | {rf:,.0f} | {errs} | "
                     f"{', '.join(r[1]['attacks'] for r in rows[s])} |")
    (out / f"flood-{args.flood}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
