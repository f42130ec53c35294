#!/usr/bin/env python3
"""WebAssembly modules against native modules and CGI, one dynamic GET, in one run.

One ramjet (release build with `--features wasm`, one worker pinned to CPU 0, in its own
v1 cpuacct cgroup so the CGI programs it forks are counted) serves the same greeting
three ways:
  native   the built-in example module (`module = "hello"`)
  wasm     the example component (`wasm/hello`, `module = "wasm"`), the same text from
           the same fields: instances reused on the worker (the default)
  wasm-fresh  the same component with `reuse = false`: a fresh pooled instance per request
  cgi      the same text from a C program (`bench/greet_cgi.c`), a process per request
The load is `ramjet bench -c C -d D` on CPU 1 against each path in turn, the order rotated
each round; median of the rounds. Rows: requests/s, requests per server CPU-second, p99. Two more rows give each module a
reply with more work of its own (lines of text around a 21.5 KB file range sent by
sendfile: the native example with its `file` option, the component's `/file/` path) and
compare them with each other. Then SPECweb99's dynamic GET and CAD (specweb99.md §3) from
the native module, the component built from the same source (`wasm/specweb99`) and, for
the GET, the kit's logic as Perl CGI (integrations/specweb99), over a file set for 10
connections, after one Reset each.

Then the isolation row: the p99 of static 4 KB requests (-c 10) alone, and again while a
client keeps the hostile module looping (`wasm/misbehave` /loop, a 1 s CPU budget each
time) on the same worker.

    cargo build --release -p ramjet --features wasm
    python3 bench/wasm.py --rounds 3 --out bench/results/$(date +%F)-wasm
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import procstat  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PORT = 18731
SPECWEB_OBJECT = "/file_set/dir00001/class1_3"
WORK = Path("/tmp/ramjet-bench/wasm")
PATHS = {"native": "/n/x?y=1", "wasm": "/w/x?y=1", "wasm-fresh": "/wf/x?y=1",
         "cgi": "/cgi/greet?y=1",
         # A reply whose own work is larger: generated lines around a 21.5 KB file range
         # (SPECweb99's median class), sent by sendfile.
         "native-file": "/nf/x", "wasm-file": "/w/file/21k.bin",
         # SPECweb99's dynamic GET (a class 1 file, 10.2 KB, framed) and its CAD (the ad
         # chosen for the cookie's user and substituted into the file's tags): the native
         # module, the component built from the same source, and the kit's Perl CGI.
         "native-specweb": "/s99n?" + SPECWEB_OBJECT, "wasm-specweb": "/s99w?" + SPECWEB_OBJECT,
         "cgi-specweb": "/cgi-bin/specweb99-dynamic.pl?" + SPECWEB_OBJECT,
         "native-cad": "/s99n?" + SPECWEB_OBJECT, "wasm-cad": "/s99w?" + SPECWEB_OBJECT}
CAD_COOKIE = "Cookie: my_cookie=user_id=10003&last_ad=5"
SPECWEB_RESET = "?command/Reset&maxload=10&pttime=300&maxthread=10&exp=5,105&urlroot=/file_set/"


def build_guests():
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT / "wasm", check=True)
    return ROOT / "wasm/target/wasm32-wasip2/release"


def build_cgi():
    cgi = WORK / "cgi"
    cgi.mkdir(parents=True, exist_ok=True)
    subprocess.run(["gcc", "-O2", "-o", str(cgi / "greet"), str(ROOT / "bench/greet_cgi.c")],
                   check=True)
    return cgi


def specweb_set(binary):
    """A SPECweb99 file set for 10 connections, made once."""
    www = WORK / "specweb"
    if not (www / "file_set").is_dir():
        subprocess.run([binary, "specweb", "fileset", "-c", "10", str(www)], check=True,
                       stdout=subprocess.DEVNULL)
    for d in ("data", "cgi-data"):
        (WORK / d).mkdir(parents=True, exist_ok=True)
    return www


def config(guests, cgi, specweb):
    www = WORK / "www"
    www.mkdir(parents=True, exist_ok=True)
    (www / "4k.bin").write_bytes(os.urandom(4096))
    (www / "21k.bin").write_bytes(os.urandom(22016))
    return f"""listen = ["127.0.0.1:{PORT}"]
workers = 1
[limits]
max_connections = 10000
cgi_processes = 64
[log]
access = "off"
[[location]]
root = "{www}"
[[location]]
path = "/n/"
module = "hello"
[[location]]
path = "/nf/"
module = "hello"
[location.module_config]
file = "{www}/21k.bin"
[[location]]
path = "/w/"
module = "wasm"
[location.module_config]
component = "{guests}/hello.wasm"
files = {{ www = "{www}" }}
[[location]]
path = "/wf/"
module = "wasm"
[location.module_config]
component = "{guests}/hello.wasm"
reuse = false
[[location]]
path = "/bad/"
module = "wasm"
[location.module_config]
component = "{guests}/misbehave.wasm"
cpu = "1s"
[[location]]
path = "/cgi/"
cgi_root = "{cgi}"
[[location]]
path = "/s99n"
module = "specweb99"
[location.module_config]
root = "{specweb}"
data_dir = "{WORK}/data"
[[location]]
path = "/s99w"
module = "wasm"
[location.module_config]
component = "{guests}/specweb99.wasm"
files = {{ set = "{specweb}" }}
journals = {{ posts = "{WORK}/data/posts" }}
[[location]]
path = "/cgi-bin/"
cgi_root = "{ROOT}/integrations/specweb99"
cgi_env = {{ SPECWEB_ROOT = "{specweb}", SPECWEB_DATA = "{WORK}/cgi-data", SPECWEB_SERVER = "ramjet" }}
"""


def bench(binary, url, conns, duration, headers=()):
    cmd = ["taskset", "-c", "1", binary, "bench", "--json", "--no-progress", "-c", str(conns),
           "-d", duration, url]
    for h in headers:
        cmd += ["-H", h]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: {out.stdout}{out.stderr}")
    return json.loads(out.stdout[out.stdout.index("{"):])


def headers_of(name):
    return [CAD_COOKIE] if name.endswith("-cad") else []


def p99_ms(report):
    return float(report["latency_ms"]["p99"])


def loop_forever(stop):
    """Keep the hostile module looping: one request at a time, each spending its budget."""
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", PORT), timeout=10) as s:
                s.sendall(b"GET /bad/loop HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
                while s.recv(65536):
                    pass
        except OSError:
            time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=str(ROOT / "target/release/ramjet"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", default="5s")
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    guests, cgi = build_guests(), build_cgi()
    specweb = specweb_set(args.binary)
    (WORK / "ramjet.toml").write_text(config(guests, cgi, specweb))
    group = procstat.Group("wasm")
    env = dict(os.environ, RAMJET_WASM_CACHE=str(WORK / "cache"))
    log = open(WORK / "ramjet.log", "w")
    proc = subprocess.Popen(group.join_command([args.binary, "serve", "--config",
                                                str(WORK / "ramjet.toml")]),
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    runs = {k: [] for k in PATHS}
    try:
        procstat.wait_port(PORT, proc)
        base = f"http://127.0.0.1:{PORT}"
        for reset in ("/s99n", "/s99w", "/cgi-bin/specweb99-dynamic.pl"):
            bench(args.binary, base + reset + SPECWEB_RESET, 1, "1s")
        for name, path in PATHS.items():  # warm: compiled code, file cache, CGI binary
            bench(args.binary, base + path, 4, "1s", headers_of(name))
        order = list(PATHS)
        for r in range(args.rounds):
            for name in order[r % len(order):] + order[:r % len(order)]:
                c0, (u0, s0) = group.cpu(), group.user_sys()
                rep = bench(args.binary, base + PATHS[name], args.connections, args.duration,
                            headers_of(name))
                used, (u1, s1) = group.cpu() - c0, group.user_sys()
                done, rps = rep["responses"], rep["requests_per_sec"]
                runs[name].append({"rps": rps, "per_cpu": done / used, "cpu_s": used,
                                   "user_us": (u1 - u0) / done * 1e6,
                                   "sys_us": (s1 - s0) / done * 1e6,
                                   "p99_ms": p99_ms(rep), "errors": rep["errors"]["total"]})
                print(f"round {r + 1} {name}: {rps:.0f} req/s, "
                      f"{done / used:.0f} per CPU-s, p99 {p99_ms(rep):.2f} ms", flush=True)
        alone, during = [], []
        for r in range(args.rounds):
            alone.append(p99_ms(bench(args.binary, base + "/4k.bin", 10, args.duration)))
            stop = threading.Event()
            t = threading.Thread(target=loop_forever, args=(stop,))
            t.start()
            time.sleep(0.5)
            during.append(p99_ms(bench(args.binary, base + "/4k.bin", 10, args.duration)))
            stop.set()
            t.join()
            print(f"round {r + 1} static 4 KB p99: alone {alone[-1]:.2f} ms, "
                  f"with a module looping {during[-1]:.2f} ms", flush=True)
    finally:
        procstat.stop(proc)
        group.remove()
    loops = sum(1 for line in (WORK / "ramjet.log").read_text().splitlines()
                if "ran past its CPU budget" in line)
    med = {k: {f: statistics.median(x[f] for x in v)
               for f in ("rps", "per_cpu", "p99_ms", "user_us", "sys_us")}
           for k, v in runs.items()}
    result = {"runs": runs, "median": med, "static_p99_alone_ms": alone,
              "static_p99_with_loop_ms": during, "loops_stopped": loops,
              "command": " ".join(sys.argv)}
    (out / "wasm.json").write_text(json.dumps(result, indent=2))
    n = med["native"]
    lines = [
        "# WebAssembly modules vs native modules vs CGI: one dynamic GET",
        "",
        f"`{' '.join(['python3'] + sys.argv)}`; ramjet one worker on CPU 0, `ramjet bench -c "
        f"{args.connections} -d {args.duration}` on CPU 1, median of {args.rounds} rounds, "
        "order rotated; server CPU from its cgroup (CGI processes included).",
        "",
        "| | req/s | req per server CPU-s | p99 ms | vs native (per CPU) | user µs/req | system µs/req |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows = (("native module", "native"), ("WebAssembly module", "wasm"),
            ("WebAssembly, a fresh instance per request", "wasm-fresh"),
            ("CGI (C program)", "cgi"),
            ("native module, text around a 21.5 KB file range", "native-file"),
            ("WebAssembly module, text around a 21.5 KB file range", "wasm-file"),
            ("SPECweb99 dynamic GET: native module", "native-specweb"),
            ("SPECweb99 dynamic GET: WebAssembly module (wasm/specweb99)", "wasm-specweb"),
            ("SPECweb99 dynamic GET: the kit's logic as Perl CGI", "cgi-specweb"),
            ("SPECweb99 CAD (ad chosen and substituted): native module", "native-cad"),
            ("SPECweb99 CAD: WebAssembly module", "wasm-cad"))
    for name, key in rows:
        m = med[key]
        base = {"-file": med["native-file"], "specweb": med["native-specweb"],
                "-cad": med["native-cad"]}
        base = next((v for k, v in base.items() if key.endswith(k)), n)
        lines.append(f"| {name} | {m['rps']:,.0f} | {m['per_cpu']:,.0f} | {m['p99_ms']:.2f} | "
                     f"{m['per_cpu'] / base['per_cpu']:.2f}x | {m['user_us']:.1f} | "
                     f"{m['sys_us']:.1f} |")
    lines += [
        "",
        f"Static 4 KB at -c 10, p99: alone {statistics.median(alone):.2f} ms, while a module "
        f"loops on the same worker {statistics.median(during):.2f} ms (medians of "
        f"{args.rounds}; {loops} looping calls stopped at their 1 s budget).",
    ]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
