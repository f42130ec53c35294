#!/usr/bin/env python3
"""Caching proxies compared in one run: ramjet's cache, Varnish (malloc storage, plus file
storage for the Zipf set) and nginx `proxy_cache`, in front of the same origin (ramjet
serving files with `Cache-Control: max-age=3600`), plus ramjet serving the same files as
static files (the floor a cache hit is held to).

The cache under test runs one worker/thread pinned to CPU 0; the origin and the load
(`wrk -t1`) share CPU 1. Profiles:

- `hit 4KB c50`, `hit 1MB c50`: one object, warmed first: hits only. Requests per
  cache-CPU-second (from /proc/PID/stat), req/s and p99.
- `zipf c50`: Zipf (s=1) over N objects of 64 KiB, a set larger than the memory budget
  (each cache gets the same budgets: 32 MiB of memory and 1 GiB of disk). Origin bytes are
  read from the origin's access log and compared with the minimum the budgets allow: every
  object requested once (the set fits the two tiers together).
- `cold storm`: 500 connections ask at once for an object none has: origin requests for it.

Every profile runs ROUNDS times, servers rotated per round; the report gives the median
run. Usage (as root):

    bench/cache.py --out bench/results/$(date +%F)-cache [--rounds 3] [--duration 8]
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare  # noqa: E402
import instructions as instructions_bench  # noqa: E402
import procstat  # noqa: E402
from proxy import Proc  # noqa: E402

ROOT = compare.ROOT
WORK = Path(tempfile.gettempdir()) / "ramjet-cache-bench"
ORIGIN_ROOT = WORK / "origin"
ORIGIN_PORT = 18290
ORIGIN_LOG = WORK / "origin-access.log"
PORTS = {"ramjet": 18291, "varnish": 18292, "nginx": 18293, "static": 18294}
ZIPF_OBJECTS = 2000
ZIPF_SIZE = 64 << 10
MEMORY = "32m"

PROFILES = [
    ("hit 4KB c50", "/o/4k.bin", 50),
    ("hit 1MB c50", "/o/1m.bin", 50),
    ("zipf c50", "zipf", 50),
]


def make_files():
    (ORIGIN_ROOT / "o").mkdir(parents=True, exist_ok=True)
    (ORIGIN_ROOT / "z").mkdir(parents=True, exist_ok=True)
    for name, size in {"4k.bin": 4096, "1m.bin": 1 << 20}.items():
        p = ORIGIN_ROOT / "o" / name
        if not p.exists() or p.stat().st_size != size:
            p.write_bytes(os.urandom(size))
    for i in range(10):
        p = ORIGIN_ROOT / "o" / f"storm-{i}.bin"
        if not p.exists():
            p.write_bytes(os.urandom((1 << 20) + 1))
    for i in range(ZIPF_OBJECTS):
        p = ORIGIN_ROOT / "z" / f"{i}.bin"
        if not p.exists():
            p.write_bytes(os.urandom(ZIPF_SIZE))
    # wrk picks objects by Zipf (s = 1): a cumulative table and a binary search.
    (WORK / "zipf.lua").write_text(f"""
local n = {ZIPF_OBJECTS}
local cdf = {{}}
local total = 0
for i = 1, n do total = total + 1 / i; cdf[i] = total end
for i = 1, n do cdf[i] = cdf[i] / total end
math.randomseed(7)
request = function()
  local u = math.random()
  local lo, hi = 1, n
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cdf[mid] < u then lo = mid + 1 else hi = mid end
  end
  return wrk.format(nil, "/z/" .. (lo - 1) .. ".bin")
end
""")


def origin_cmd(ramjet_bin, conf):
    cfg = conf / "origin.toml"
    cfg.write_text(
        f'listen = ["127.0.0.1:{ORIGIN_PORT}"]\nworkers = 1\n[log]\naccess = "{ORIGIN_LOG}"\n'
        f'format = "common"\n[timeouts]\nkeepalive = "300s"\n'
        f'[[location]]\nroot = "{ORIGIN_ROOT}"\nexpires = "1h"\n'
    )
    return [ramjet_bin, "serve", "--config", str(cfg)]


def cache_cmd(name, conf, ramjet_bin):
    port = PORTS[name]
    disk = conf / "disk"
    disk.mkdir(exist_ok=True)
    if name in ("ramjet", "static"):
        cfg = conf / "ramjet.toml"
        common = (f'listen = ["127.0.0.1:{port}"]\nworkers = 1\n[log]\naccess = "off"\n'
                  f'[timeouts]\nkeepalive = "300s"\nheader = "300s"\n')
        if name == "static":
            cfg.write_text(common + f'[[location]]\nroot = "{ORIGIN_ROOT}"\nexpires = "1h"\n')
        else:
            cfg.write_text(
                common
                + f'[upstream.origin]\nservers = ["127.0.0.1:{ORIGIN_PORT}"]\nkeepalive = 600\n'
                f'keepalive_timeout = "60s"\n[cache.c]\nmemory = "{MEMORY}"\ndisk = "{disk}"\n'
                f'disk_size = "1g"\n[[location]]\nproxy = "origin"\ncache = "c"\n'
            )
        return [ramjet_bin, "serve", "--config", str(cfg)]
    if name == "varnish":
        # varnishd reads the VCL and writes its storage as its own unprivileged user.
        os.chmod(conf, 0o755)
        os.chmod(disk, 0o777)
        vcl = conf / "default.vcl"
        vcl.write_text(f'vcl 4.1;\nbackend origin {{ .host = "127.0.0.1"; .port = "{ORIGIN_PORT}"; }}\n')
        return ["varnishd", "-F", "-n", str(conf / "varnish"), "-a", f"127.0.0.1:{port}",
                "-f", str(vcl), "-s", f"memory=malloc,{MEMORY}", "-s", f"disk=file,{disk}/varnish.bin,1g",
                "-p", "thread_pools=1", "-p", "thread_pool_min=100", "-p", "thread_pool_max=1000"]
    if name == "nginx":
        cfg = conf / "nginx.conf"
        cfg.write_text(procstat.nginx_conf_head(conf) + f"""http {{
  access_log off;
  sendfile on; tcp_nopush on; tcp_nodelay on;
  keepalive_requests 10000000; keepalive_timeout 300s;
  client_body_temp_path {conf}/body; proxy_temp_path {conf}/proxy;
  proxy_cache_path {disk} levels=1:2 keys_zone=c:{MEMORY} max_size=1g inactive=1h use_temp_path=off;
  upstream origin {{ server 127.0.0.1:{ORIGIN_PORT}; keepalive 600; }}
  server {{
    listen 127.0.0.1:{port} reuseport backlog=4096;
    location / {{
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache c;
      proxy_cache_lock on;
      proxy_cache_lock_timeout 30s;
    }}
  }}
}}
""")
        (conf / "body").mkdir(exist_ok=True)
        (conf / "proxy").mkdir(exist_ok=True)
        return ["nginx", "-c", str(cfg), "-e", str(conf / "nginx-error.log")]
    raise ValueError(name)


def wrk(port, what, conns, duration):
    cmd = ["taskset", "-c", "1", "wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency"]
    if what == "zipf":
        return cmd + ["-s", str(WORK / "zipf.lua"), f"http://127.0.0.1:{port}/"]
    return cmd + [f"http://127.0.0.1:{port}{what}"]


def origin_log():
    """(requests, body bytes) per path in the origin's access log so far."""
    per = {}
    try:
        text = ORIGIN_LOG.read_text()
    except OSError:
        return per
    for line in text.splitlines():
        try:
            req = line.split('"')[1].split()
            tail = line.rsplit('"', 1)[1].split()
            size = 0 if tail[1] == "-" else int(tail[1])
        except (IndexError, ValueError):
            continue
        n, b = per.get(req[1], (0, 0))
        per[req[1]] = (n + 1, b + size)
    return per


def run(server, profile, duration):
    _name, what, conns = profile
    port = PORTS[server.name]
    if what != "zipf":
        subprocess.run(wrk(port, what, conns, 1), capture_output=True)
    before = server.cpu_ticks()
    log_before = origin_log()
    cmd = wrk(port, what, conns, duration)
    out = compare.load_output(cmd)
    time.sleep(1)  # the origin's log buffer is flushed every second
    cpu = (server.cpu_ticks() - before) / compare.TICK
    r = compare.parse_wrk(out)
    r.update(cpu_s=cpu, rps_per_cpu_s=r["requests"] / cpu if cpu else 0,
             us_per_request=cpu * 1e6 / r["requests"] if r["requests"] else None, cmd=" ".join(cmd))
    if what == "zipf":
        after = origin_log()
        fetched = {p: (n - log_before.get(p, (0, 0))[0], b - log_before.get(p, (0, 0))[1])
                   for p, (n, b) in after.items() if p.startswith("/z/")}
        fetched = {p: v for p, v in fetched.items() if v[0] > 0}
        origin_bytes = sum(b for _, b in fetched.values())
        minimum = len(fetched) * ZIPF_SIZE
        r.update(origin_bytes=origin_bytes, origin_minimum=minimum,
                 origin_excess=(origin_bytes / minimum - 1) if minimum else None,
                 origin_requests=sum(n for n, _ in fetched.values()), objects=len(fetched))
    return r


def storm(server, path, conns=500):
    """`conns` connections ask for `path` at once; the origin requests it made."""
    port = PORTS[server.name]
    before = origin_log().get(path, (0, 0))[0]
    go = threading.Event()
    ok = [0]
    lock = threading.Lock()

    def one():
        s = socket.create_connection(("127.0.0.1", port))
        go.wait()
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
        s.close()
        if data.startswith(b"HTTP/1.1 200") and len(data) > (1 << 20):
            with lock:
                ok[0] += 1

    threads = [threading.Thread(target=one) for _ in range(conns)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join()
    time.sleep(1.5)
    return {"connections": conns, "complete": ok[0], "origin_requests": origin_log().get(path, (0, 0))[0] - before}


def instructions(ramjet_bin, path="/o/4k.bin", n1=500, n2=2500):
    """Instructions per keep-alive request (callgrind Ir of the whole process, (Ir(n2) -
    Ir(n1)) / (n2 - n1)) of ramjet's cache hit and of ramjet serving the file itself: a
    count that does not depend on what else the machine is doing."""
    per = {}
    for name in ("ramjet", "static"):
        counts = {}
        for n in (n1, n2):
            origin = Proc("origin", lambda d: origin_cmd(ramjet_bin, d), ORIGIN_PORT, 1)
            conf = Path(tempfile.mkdtemp(prefix="cache-ir-"))
            out = conf / "cg.out"
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + cache_cmd(name, conf, ramjet_bin)
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            procstat.wait_port(PORTS[name], p, within=120)
            url = f"http://127.0.0.1:{PORTS[name]}{path}"
            for count in (1, n):
                subprocess.run([ramjet_bin, "bench", "-c", "1", "-n", str(count), url], check=True,
                               capture_output=True, timeout=600)
            instructions_bench.stop(p)
            origin.stop()
            counts[n] = instructions_bench.callgrind_total(conf.glob("cg.out*"))
            shutil.rmtree(conf, ignore_errors=True)
        per[name] = (counts[n2] - counts[n1]) / (n2 - n1)
    return per


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--servers", default="ramjet,varnish,nginx,static")
    ap.add_argument("--ramjet", default=str(ROOT / "target/release/ramjet"))
    ap.add_argument("--instructions", action="store_true",
                    help="also count instructions per 4 KB hit and per static 4 KB response (callgrind)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    make_files()
    names = args.servers.split(",")
    results = {p[0]: {n: [] for n in names} for p in PROFILES}
    storms = {n: [] for n in names if n != "static"}
    origin = None
    try:
        for rnd in range(args.rounds):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            for name in order:
                if origin is not None:
                    origin.stop()
                ORIGIN_LOG.unlink(missing_ok=True)
                origin = Proc("origin", lambda d: origin_cmd(args.ramjet, d), ORIGIN_PORT, 1)
                server = Proc(name, lambda d, n=name: cache_cmd(n, d, args.ramjet), PORTS[name], 0)
                try:
                    for profile in PROFILES:
                        if name == "static" and profile[1] == "zipf":
                            continue
                        r = run(server, profile, args.duration)
                        results[profile[0]][name].append(r)
                        extra = ""
                        if "origin_excess" in r:
                            extra = f" origin {r['origin_bytes']:,} B ({r['origin_excess']:+.2%} over the minimum)"
                        print(f"round {rnd + 1} {name:8} {profile[0]:14} {r['rps']:>10,.0f} req/s "
                              f"{r['rps_per_cpu_s']:>10,.0f} req/cpu-s p99 {r['p99_ms']} ms{extra}", flush=True)
                    if name != "static":
                        s = storm(server, f"/o/storm-{rnd % 10}.bin")
                        storms[name].append(s)
                        print(f"round {rnd + 1} {name:8} cold storm: {s}", flush=True)
                finally:
                    server.stop()
    finally:
        if origin is not None:
            origin.stop()
    ir = instructions(args.ramjet) if args.instructions else None
    report(results, storms, names, args, out, ir)


def report(results, storms, names, args, out, ir=None):
    lines = ["# Caching proxies compared", "",
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; `{' '.join(sys.argv)}`; the cache on CPU 0 "
             "(one worker/thread), the origin (ramjet, files with max-age=3600) and `wrk -t1` on CPU 1; "
             f"budgets {MEMORY} memory + 1 GiB disk each; median of {args.rounds} rounds by req/s; CPU "
             "from /proc/PID/stat of the cache. `static`: ramjet serving the origin's files itself.", "",
             "| profile | server | req/s | p99 ms | CPU µs/req | req per CPU-s | vs varnish | vs nginx | origin bytes over minimum |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    summary = {}
    for profile, per in results.items():
        med = {n: compare.median_run(rs) for n, rs in per.items() if rs}
        v = med.get("varnish", {}).get("rps_per_cpu_s")
        g = med.get("nginx", {}).get("rps_per_cpu_s")
        for n in names:
            if n not in med:
                continue
            r = med[n]
            excess = r.get("origin_excess")
            lines.append(
                f"| {profile} | {n} | {r['rps']:,.0f} | {compare.fmt(r['p99_ms'], 2)} | "
                f"{compare.fmt(r['us_per_request'], 1)} | {r['rps_per_cpu_s']:,.0f} | "
                f"{compare.fmt(r['rps_per_cpu_s'] / v if v else None, 2)} | "
                f"{compare.fmt(r['rps_per_cpu_s'] / g if g else None, 2)} | "
                f"{'-' if excess is None else f'{excess:+.2%}'} |")
            summary.setdefault(profile, {})[n] = {k: r.get(k) for k in (
                "rps", "p99_ms", "us_per_request", "rps_per_cpu_s", "non2xx", "socket_errors", "cmd",
                "origin_bytes", "origin_minimum", "origin_excess", "origin_requests", "objects")}
    lines += ["", "Cold storm (500 connections at once for an object not stored; origin requests made):", ""]
    for n, s in storms.items():
        lines.append(f"- {n}: " + "; ".join(f"{x['origin_requests']} origin request(s), {x['complete']}/{x['connections']} complete" for x in s))
    if ir:
        lines += ["", "Instructions per keep-alive request (callgrind, whole process, one worker; "
                  "(Ir at 2,500 requests - Ir at 500) / 2,000): "
                  f"4 KB cache hit {ir['ramjet']:,.0f}, the same file served as a static file {ir['static']:,.0f} "
                  f"({ir['ramjet'] / ir['static']:.3f}x)."]
    versions = procstat.tool_versions((["nginx", "-v"], ["varnishd", "-V"]))
    lines += ["", "Versions: " + "; ".join(versions), ""]
    (out / "cache.md").write_text("\n".join(lines) + "\n")
    (out / "cache.json").write_text(json.dumps({"results": summary, "storms": storms, "instructions": ir,
                                                "versions": versions}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    shutil.which("varnishd") or sys.exit("varnishd is not installed (apt install varnish)")
    main()
