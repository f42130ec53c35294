#!/usr/bin/env python3
"""What a cold cache pays per miss with a disk tier: ramjet's cache and nginx `proxy_cache`
(one process each, pinned to CPU 0) in front of the same origin (ramjet serving files,
`Cache-Control: max-age=600`, on CPU 1 with the client). Each round starts with an empty
cache directory; the client (one keep-alive connection, CPU 1) asks once for each of
`--objects` files of 1 to 64 KiB (every request a miss: the fill, the disk files), then
`--hit-passes` times more for all of them (hits). Reported: requests per cache CPU-second
(from /proc/PID/stat) for the misses and for the hits, median of the rounds (servers
alternate). The budgets hold the whole set (16 MiB of disk, 4 MiB of memory, objects up to
64 KiB kept in memory and written through), so the hits are hits.

    bench/cold_fill.py --out bench/results/$(date +%F)-cold-fill [--rounds 5]
    bench/cold_fill.py --binaries before=/tmp/old/ramjet,after=target/release/ramjet ...
"""
import argparse
import http.client
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import procstat  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ORIGIN_PORT, CACHE_PORT = 18401, 18402


def make_objects(root, count):
    rng = random.Random(26)
    (root / "o").mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(count):
        n = int(1024 * 64 ** rng.random())
        name = f"{i:05d}.bin"
        (root / "o" / name).write_bytes(b"x" * n)
        names.append(name)
    return names


def start_cache(kind, binary, work):
    cache = work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    if kind != "nginx":
        conf = work / "node.toml"
        conf.write_text(f"""listen = ["127.0.0.1:{CACHE_PORT}"]
workers = 1
[log]
access = "off"
[upstream.o]
servers = ["127.0.0.1:{ORIGIN_PORT}"]
[cache.c]
memory = "4m"
memory_object_max = "64k"
disk = "{cache}"
disk_size = "16m"
[[location]]
proxy = "o"
cache = "c"
cache_key = ["path", "query"]
""")
        cmd = [binary, "serve", "--config", str(conf)]
    else:
        d = work / "nginx"
        d.mkdir(exist_ok=True)
        (d / "nginx.conf").write_text(procstat.nginx_conf_head(d) + f"""http {{
  access_log off;
  proxy_temp_path {d}/tmp;
  proxy_cache_path {cache} levels=1:2 keys_zone=c:4m max_size=16m inactive=1d use_temp_path=off;
  upstream o {{ server 127.0.0.1:{ORIGIN_PORT}; keepalive 32; }}
  server {{
    listen 127.0.0.1:{CACHE_PORT};
    location / {{
      proxy_pass http://o;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache c;
      proxy_cache_key $uri$is_args$args;
      proxy_cache_lock on;
    }}
  }}
}}
""")
        cmd = ["nginx", "-p", str(d), "-c", str(d / "nginx.conf")]
    p = subprocess.Popen(["taskset", "-c", "0", *cmd], stderr=subprocess.DEVNULL)
    procstat.wait_port(CACHE_PORT, p)
    return p


def one(kind, binary, work, names, passes):
    p = start_cache(kind, binary, work)
    try:
        c = http.client.HTTPConnection("127.0.0.1", CACHE_PORT, timeout=30)

        def run(todo):
            before = procstat.tree_cpu([p.pid])
            for n in todo:
                c.request("GET", "/o/" + n)
                r = c.getresponse()
                r.read()
                if r.status != 200:
                    raise SystemExit(f"{kind}: /o/{n}: {r.status}")
            return len(todo) / max(procstat.tree_cpu([p.pid]) - before, 1e-3)

        return run(names), run(names * passes)
    finally:
        procstat.stop(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binaries", default=f"ramjet={ROOT}/target/release/ramjet",
                    help="label=path,... of ramjet builds; nginx is always run too")
    ap.add_argument("--objects", type=int, default=600)
    ap.add_argument("--hit-passes", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    os.sched_setaffinity(0, {1})
    work = Path(tempfile.mkdtemp(prefix="ramjet-cold-fill-"))
    runs = {}
    origin = None
    try:
        names = make_objects(work / "objects", args.objects)
        conf = work / "origin.toml"
        conf.write_text(f"""listen = ["127.0.0.1:{ORIGIN_PORT}"]
workers = 1
[log]
access = "off"
[[location]]
root = "{work}/objects"
headers = {{ "Cache-Control" = "max-age=600" }}
""")
        binaries = dict(b.split("=", 1) for b in args.binaries.split(","))
        origin = subprocess.Popen(["taskset", "-c", "1", list(binaries.values())[-1], "serve",
                                   "--config", str(conf)], stderr=subprocess.DEVNULL)
        procstat.wait_port(ORIGIN_PORT, origin)
        servers = [*binaries.items(), ("nginx", "nginx")]
        for _ in range(args.rounds):
            for label, binary in servers:
                kind = "nginx" if label == "nginx" else "ramjet"
                runs.setdefault(label, []).append(one(kind, binary, work, names,
                                                      args.hit_passes))
    finally:
        if origin is not None:
            procstat.stop(origin)
        shutil.rmtree(work, ignore_errors=True)
    lines = [
        "# A cold cache with a disk tier: misses and hits per cache CPU-second",
        "",
        f"Command: `bench/cold_fill.py {' '.join(sys.argv[1:])}`",
        "",
        f"{args.objects} objects of 1 to 64 KiB, asked once each from an empty cache "
        f"(misses), then {args.hit_passes} times more (hits); one keep-alive connection; "
        f"cache on CPU 0, origin and client on CPU 1; median of {args.rounds} rounds.",
        "",
        "| server | misses per CPU-s | hits per CPU-s | misses, every round |",
        "|---|---:|---:|---|",
    ]
    for label, rs in runs.items():
        miss = statistics.median(r[0] for r in rs)
        hit = statistics.median(r[1] for r in rs)
        every = ", ".join(f"{r[0]:,.0f}" for r in rs)
        lines.append(f"| {label} | {miss:,.0f} | {hit:,.0f} | {every} |")
    if args.out:
        procstat.write_report(args.out, lines)
    else:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
