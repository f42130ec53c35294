#!/usr/bin/env python3
"""Reverse proxies compared in one run: ramjet, nginx (proxy_pass, upstream keepalive) and
HAProxy (http-reuse always) in front of the same fast backend, plus the accelerator mix
(70% static files served by the proxy itself, 30% forwarded; nginx with
`try_files $uri @backend`).

The proxy under test runs one worker pinned to CPU 0; the backend (ramjet serving small
files, one worker) and the load (`wrk -t1`) share CPU 1, so the proxy is measured by its own
CPU time: requests per proxy-CPU-second from /proc/PID/stat, plus req/s and p99. Every
profile runs ROUNDS times, servers rotated per round; the report gives the median run.
Every proxy adds the forwarding fields an operator configures (X-Forwarded-For/-Proto, the
client's Host), so they do the same work. The backend (--backend) is ramjet, `minhttpd`
(bench/minhttpd.c: one fixed body per request, the floor of what a backend costs, so the
proxy is the only HTTP server measured), `minhttpd-close` (the same, closing every
connection after its response: a new upstream connection per request) or gunicorn's sync
workers, which close the connection after every response too. Usage (as root):

    bench/proxy.py --out bench/results/$(date +%F)-proxy [--rounds 3] [--duration 8] \
        [--backend ramjet|minhttpd|minhttpd-close|gunicorn] [--profiles "proxied 4KB c500,..."]
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
import congestion  # noqa: E402  (same directory: the kernel's TCP congestion control)
import compare  # noqa: E402  (same directory: its wrk parsing, CPU accounting and files)
import procstat  # noqa: E402

ROOT = compare.ROOT
WORK = Path(tempfile.gettempdir()) / "ramjet-proxy-bench"
BACKEND_ROOT = WORK / "backend"
LOCAL_ROOT = WORK / "local"
BACKEND_PORT = 18190
PORTS = {"ramjet": 18191, "nginx": 18192, "haproxy": 18193}

# name, wrk script or path, connections
PROFILES = [
    ("proxied 100B c50", "/b/100.bin", 50),
    ("proxied 4KB c50", "/b/4k.bin", 50),
    ("proxied 4KB c500", "/b/4k.bin", 500),
    ("proxied 64KB c50", "/b/64k.bin", 50),
    ("mix 70% static 30% proxied c50", "mix", 50),
]


def make_files():
    for root in (BACKEND_ROOT / "b", LOCAL_ROOT / "s"):
        root.mkdir(parents=True, exist_ok=True)
    for name, size in {"100.bin": 100, "4k.bin": 4096, "64k.bin": 65536}.items():
        for root in (BACKEND_ROOT / "b", LOCAL_ROOT / "s"):
            p = root / name
            if not p.exists() or p.stat().st_size != size:
                p.write_bytes(os.urandom(size))
    # The mix: each connection walks 10 URLs, 7 files the proxy has, 3 it forwards.
    paths = [f"/s/4k.bin?{i}" for i in range(7)] + [f"/b/4k.bin?{i}" for i in range(3)]
    (WORK / "mix.lua").write_text(
        "local paths = {" + ", ".join(f'"{p}"' for p in paths) + "}\nlocal i = 0\n"
        "request = function()\n  i = i % #paths + 1\n  return wrk.format(nil, paths[i])\nend\n"
    )


def backend_cmd(ramjet_bin, conf):
    cfg = conf / "backend.toml"
    cfg.write_text(
        f'listen = ["127.0.0.1:{BACKEND_PORT}"]\nworkers = 1\n[log]\naccess = "off"\n'
        f'[timeouts]\nkeepalive = "300s"\n[[location]]\nroot = "{BACKEND_ROOT}"\n'
    )
    return [ramjet_bin, "serve", "--config", str(cfg)]


def minhttpd_cmd(size, close=False):
    """The minimal C server answering every request with `size` bytes (built once); with
    `close`, it closes every connection after one response, as gunicorn's sync workers do."""
    binary = WORK / "minhttpd"
    src = Path(__file__).resolve().parent / "minhttpd.c"
    if not binary.exists() or binary.stat().st_mtime < src.stat().st_mtime:
        subprocess.run(["cc", "-O2", "-o", str(binary), str(src)], check=True)
    flags = ["-x"] if close else []
    return lambda _d: [str(binary), "-p", str(BACKEND_PORT), "-c", "1", "-s", str(size), "-a", "127.0.0.1"] + flags


GUNICORN_APP = """
import os
BODIES = {}
def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path not in BODIES:
        with open(os.path.join(ROOT, path.lstrip("/")), "rb") as f:
            BODIES[path] = f.read()
    body = BODIES[path]
    start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(body)))])
    return [body]
"""


def gunicorn_cmd(conf):
    """gunicorn, 4 sync workers: every response closes its connection."""
    (conf / "app.py").write_text(f"ROOT = {str(BACKEND_ROOT)!r}\n" + GUNICORN_APP)
    return ["gunicorn", "--chdir", str(conf), "-w", "4", "-k", "sync", "--backlog", "4096",
            "-b", f"127.0.0.1:{BACKEND_PORT}", "--log-level", "warning", "app:app"]


BACKEND_LABEL = {"ramjet": "ramjet, 1 worker", "minhttpd": "bench/minhttpd.c, a fixed body per request",
                 "minhttpd-close": "bench/minhttpd.c -x, a fixed body per request, a new connection per request",
                 "gunicorn": "gunicorn, 4 sync workers, a new connection per request"}

BODY_SIZES = {"/b/100.bin": 100, "/b/4k.bin": 4096, "/b/64k.bin": 65536}


def proxy_cmd(name, conf, ramjet_bin):
    port = PORTS[name]
    if name == "ramjet":
        cfg = conf / "ramjet.toml"
        cfg.write_text(
            f'listen = ["127.0.0.1:{port}"]\nworkers = 1\n[log]\naccess = "off"\n'
            f'[timeouts]\nkeepalive = "300s"\nheader = "300s"\n'
            f'[upstream.app]\nservers = ["127.0.0.1:{BACKEND_PORT}"]\nkeepalive = 600\nkeepalive_timeout = "60s"\n'
            f'[[location]]\nroot = "{LOCAL_ROOT}"\nhandlers = ["static", "proxy"]\nproxy = "app"\n'
        )
        return [ramjet_bin, "serve", "--config", str(cfg)]
    if name == "nginx":
        cfg = conf / "nginx.conf"
        cfg.write_text(procstat.nginx_conf_head(conf) + f"""http {{
  access_log off;
  sendfile on; tcp_nopush on; tcp_nodelay on;
  open_file_cache max=10000 inactive=60s; open_file_cache_valid 60s;
  keepalive_requests 10000000; keepalive_timeout 300s;
  client_body_temp_path {conf}/body; proxy_temp_path {conf}/proxy;
  include /etc/nginx/mime.types;
  upstream app {{ server 127.0.0.1:{BACKEND_PORT}; keepalive 600; keepalive_requests 10000000; keepalive_timeout 60s; }}
  server {{
    listen 127.0.0.1:{port} reuseport backlog=4096;
    root {LOCAL_ROOT};
    location / {{ try_files $uri @backend; }}
    location @backend {{
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
    }}
  }}
}}
""")
        (conf / "body").mkdir(exist_ok=True)
        (conf / "proxy").mkdir(exist_ok=True)
        return ["nginx", "-c", str(cfg), "-e", str(conf / "nginx-error.log")]
    if name == "haproxy":
        cfg = conf / "haproxy.cfg"
        cfg.write_text(f"""global
  nbthread 1
  maxconn 9000
defaults
  mode http
  option http-keep-alive
  option forwardfor
  http-reuse always
  timeout connect 5s
  timeout client 300s
  timeout server 300s
  timeout http-keep-alive 300s
frontend f
  bind 127.0.0.1:{port}
  default_backend b
backend b
  server app 127.0.0.1:{BACKEND_PORT} maxconn 1000
""")
        return ["haproxy", "-db", "-f", str(cfg)]
    raise ValueError(name)


class Proc(compare.Server):
    """A process pinned to `cpu`, waited for on `port` (reuses compare.Server's CPU/RSS)."""

    def __init__(self, name, cmd, port, cpu):
        self.name = name
        self.dir = Path(tempfile.mkdtemp(prefix=f"proxy-bench-{name}-"))
        self.start(["taskset", "-c", str(cpu)] + cmd(self.dir), port)


def wrk(port, profile, duration):
    _name, what, conns = profile
    cmd = ["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency"]
    if what == "mix":
        cmd += ["-s", str(WORK / "mix.lua"), f"http://127.0.0.1:{port}/"]
    else:
        cmd.append(f"http://127.0.0.1:{port}{what}")
    return cmd


def run(proxy, profile, duration):
    port = PORTS[proxy.name]
    subprocess.run(wrk(port, profile, 1), capture_output=True)
    before = proxy.cpu_ticks()
    t0 = time.time()
    cmd = wrk(port, profile, duration)
    out = compare.load_output(cmd)
    wall = time.time() - t0
    cpu = (proxy.cpu_ticks() - before) / compare.TICK
    r = compare.parse_wrk(out)
    r.update(proxy_cpu_s=cpu, wall_s=wall, rps_per_cpu_s=r["requests"] / cpu if cpu else 0,
             us_per_request=cpu * 1e6 / r["requests"] if r["requests"] else None, cmd=" ".join(cmd))
    return r


def check(port):
    """Each proxy answers a proxied and a local path correctly before it is measured."""
    for path, size in (("/b/4k.bin", 4096), ("/s/4k.bin", 4096)):
        out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                              f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True).stdout
        if out != f"200 {size}":
            raise RuntimeError(f"port {port} {path}: {out}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--proxies", default="ramjet,nginx,haproxy")
    ap.add_argument("--ramjet", default=str(ROOT / "target/release/ramjet"))
    ap.add_argument("--backend", default="ramjet", choices=["ramjet", "minhttpd", "minhttpd-close", "gunicorn"])
    ap.add_argument("--profiles", default="all", help="comma list of profile names, or all")
    ap.add_argument("--congestion", default="",
                    help="TCP congestion control for this run (e.g. cubic, bbr); restored after. Empty: as set")
    args = ap.parse_args()
    with congestion.use(args.congestion):
        run_all(args)


def run_all(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    make_files()
    names = args.proxies.split(",")
    profiles = [p for p in PROFILES if args.profiles == "all" or p[0] in args.profiles.split(",")]
    fixed = args.backend.startswith("minhttpd")
    if fixed:
        # One fixed body per backend process: no mix, and a backend per body size.
        profiles = [p for p in profiles if p[1] != "mix"]
    backend = None
    backend_size = None

    def start_backend(profile):
        nonlocal backend, backend_size
        size = BODY_SIZES.get(profile[1]) if fixed else None
        if backend is not None and size == backend_size:
            return
        if backend is not None:
            backend.stop()
        if fixed:
            cmd = minhttpd_cmd(size, close=args.backend == "minhttpd-close")
        elif args.backend == "gunicorn":
            cmd = gunicorn_cmd
        else:
            cmd = lambda d: backend_cmd(args.ramjet, d)  # noqa: E731
        backend, backend_size = Proc("backend", cmd, BACKEND_PORT, 1), size

    results = {p[0]: {n: [] for n in names} for p in profiles}
    try:
        for rnd in range(args.rounds):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            for name in order:
                start_backend(profiles[0])
                proxy = Proc(name, lambda d, n=name: proxy_cmd(n, d, args.ramjet), PORTS[name], 0)
                try:
                    if name != "haproxy" and not fixed:
                        check(PORTS[name])
                    for profile in profiles:
                        if name == "haproxy" and profile[1] == "mix":
                            continue  # HAProxy serves no files.
                        start_backend(profile)
                        r = run(proxy, profile, args.duration)
                        results[profile[0]][name].append(r)
                        print(f"round {rnd + 1} {name:8} {profile[0]:32} {r['rps']:>10,.0f} req/s "
                              f"{r['rps_per_cpu_s']:>10,.0f} req/cpu-s p99 {r['p99_ms']} ms", flush=True)
                finally:
                    proxy.stop()
    finally:
        if backend is not None:
            backend.stop()
    report(results, names, args, out)


def report(results, names, args, out):
    lines = ["# Reverse proxy comparison", "",
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; `{' '.join(sys.argv)}`; "
             f"TCP congestion control `{congestion.current()}`; proxy on CPU 0 "
             f"(one worker/thread), backend ({BACKEND_LABEL[args.backend]}) and "
             "`wrk -t1` on CPU 1; median of the rounds by req/s; CPU from /proc/PID/stat of the proxy. "
             "p99 ms is that round's; median p99 is the median of every round's p99 (a round's p99 "
             "and its req/s move apart, so p99s are compared by this one).", "",
             "| profile | proxy | req/s | p99 ms | median p99 ms | proxy CPU µs/req | req per proxy-CPU-s "
             "| vs nginx (req/CPU-s) | non-2xx + errors |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    rounds = []
    summary = {}
    for profile, per in results.items():
        med = {n: compare.median_run(rs) for n, rs in per.items() if rs}
        base = med.get("nginx", {}).get("rps_per_cpu_s")
        for n in names:
            if n not in med:
                continue
            r = med[n]
            ratio = r["rps_per_cpu_s"] / base if base else None
            p99s = [x["p99_ms"] for x in per[n] if x.get("p99_ms") is not None]
            p99_median = statistics.median(p99s) if p99s else None
            lines.append(f"| {profile} | {n} | {r['rps']:,.0f} | {compare.fmt(r['p99_ms'], 2)} | "
                         f"{compare.fmt(p99_median, 2)} | "
                         f"{compare.fmt(r['us_per_request'], 1)} | {r['rps_per_cpu_s']:,.0f} | "
                         f"{compare.fmt(ratio, 2)} | {r['non2xx'] + r['socket_errors']} |")
            rounds.append(f"- {profile}, {n}: " + "; ".join(
                f"{x['rps_per_cpu_s']:,.0f} req/CPU-s, p99 {compare.fmt(x['p99_ms'], 2)} ms" for x in per[n]))
            summary.setdefault(profile, {})[n] = {k: r[k] for k in ("rps", "p99_ms", "us_per_request",
                                                                    "rps_per_cpu_s", "non2xx", "socket_errors", "cmd")}
            summary[profile][n]["p99_ms_median"] = p99_median
            summary[profile][n]["rounds"] = [{k: x[k] for k in ("rps", "p99_ms", "rps_per_cpu_s")}
                                             for x in per[n]]
    versions = {}
    for cmd in (["nginx", "-v"], ["haproxy", "-v"]):
        try:
            p = subprocess.run(cmd, capture_output=True, text=True)
            versions[cmd[0]] = (p.stdout + p.stderr).splitlines()[0]
        except OSError:
            pass
    pairs = []
    for profile, per in results.items():
        by_peer = compare.paired(per)
        if by_peer:
            pairs.append(f"- {profile}: " + "; ".join(
                f"{peer} {r['rps']:.2f}x req/s, {r['rps_per_cpu_s']:.2f}x per proxy CPU-s"
                for peer, r in by_peer.items() if "rps" in r and "rps_per_cpu_s" in r))
            for peer, r in by_peer.items():
                summary[profile][peer]["ramjet_paired"] = r
    if pairs:
        lines += ["", "ramjet paired by round (ramjet's run ÷ the peer's run of the same round, the median "
                  "over the rounds; the machine's speed moves between rounds, which a ratio of medians "
                  "does not cancel):", ""] + pairs
    lines += ["", "Every round, in the order run:", ""] + rounds
    lines += ["", "Versions: " + "; ".join(versions.values()), ""]
    (out / "proxy.md").write_text("\n".join(lines) + "\n")
    (out / "proxy.json").write_text(json.dumps({"results": summary, "versions": versions}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
