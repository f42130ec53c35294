#!/usr/bin/env python3
"""What starting a CGI program costs the server while it holds many connections. Each
connection is a descriptor, and a process started from the worker copies the worker's
descriptor table and closes it again at exec; ramjet starts programs from a thread with a
table of its own (runtime/src/sys/spawner.rs), so the cost should not grow with the
connections held.

For each binary given (e.g. the build before that change and the current one) and each
count of idle keep-alive connections held open meanwhile: `ab -n N -c 4` on a trivial
CGI (a /bin/sh script), server on CPU 0, ab on CPU 1; requests/s and the server's CPU per
request (its threads and its reaped children, from /proc), median of the rounds.

    bench/cgi_spawn.py --out bench/results/$(date +%F)-cgi-spawn \\
        --binaries before=/tmp/old-target/release/ramjet,after=target/release/ramjet
"""
import argparse
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procstat import proc_cpu, stop, wait_port, write_report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PORT = 18830


def setup(work):
    cgi = work / "cgi"
    cgi.mkdir(parents=True, exist_ok=True)
    script = cgi / "hello.sh"
    script.write_text("#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\nhello\\n'\n")
    script.chmod(0o755)
    conf = work / "ramjet.toml"
    conf.write_text(f'listen = ["127.0.0.1:{PORT}"]\nworkers = 1\n[log]\naccess = "off"\n'
                    f'[limits]\nmax_connections = 100000\ncgi_processes = 64\n'
                    f'[timeouts]\nkeepalive = "10m"\n'
                    f'[[location]]\npath = "/cgi-bin/"\ncgi_root = "{cgi}"\n')
    return conf


def hold(n):
    """n idle keep-alive connections (each has sent nothing: the server holds them), from
    127.0.0.2, so that ab's new connections from 127.0.0.1 do not search 15,000 used ports
    (the CGI's reply has no length, so every HTTP/1.0 request of ab is a new connection)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        # IP_BIND_ADDRESS_NO_PORT: the port is chosen at connect, per destination.
        s.setsockopt(socket.IPPROTO_IP, 24, 1)
        s.bind(("127.0.0.2", 0))
        s.connect(("127.0.0.1", PORT))
        socks.append(s)
    return socks


def quiet(pid, within=60):
    """Until the server has used under 5 ms of CPU in half a second: the held connections
    are all accepted and parked, so their cost is not counted per request."""
    end = time.time() + within
    last = proc_cpu(pid)
    while time.time() < end:
        time.sleep(0.5)
        now = proc_cpu(pid)
        if now - last < 0.005:
            return
        last = now


def measure(binary, conf, idle, requests):
    server = subprocess.Popen(["taskset", "-c", "0", binary, "serve", "--config", str(conf)],
                              stderr=subprocess.DEVNULL)
    try:
        wait_port(PORT, server)
        socks = hold(idle)
        quiet(server.pid)
        cpu0 = proc_cpu(server.pid)
        out = subprocess.run(["taskset", "-c", "1", "ab", "-q", "-k", "-n", str(requests), "-c", "4",
                              f"http://127.0.0.1:{PORT}/cgi-bin/hello.sh"],
                             capture_output=True, text=True).stdout
        cpu1 = proc_cpu(server.pid)
        for s in socks:
            s.close()
    finally:
        stop(server)
    rps = float(re.search(r"Requests per second:\s+([\d.]+)", out).group(1))
    failed = int(re.search(r"Failed requests:\s+(\d+)", out).group(1))
    non2xx = re.search(r"Non-2xx responses:\s+(\d+)", out)
    return {"rps": rps, "us_per_request": (cpu1 - cpu0) / requests * 1e6,
            "failed": failed + (int(non2xx.group(1)) if non2xx else 0)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--binaries", default=f"current={ROOT / 'target/release/ramjet'}",
                    help="NAME=PATH,...")
    ap.add_argument("--idle", default="0,5000,15000", help="idle connections held, each run")
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="/tmp/ramjet-cgi-spawn")
    args = ap.parse_args()
    conf = setup(Path(args.work))
    binaries = dict(b.split("=", 1) for b in args.binaries.split(","))
    idles = [int(x) for x in args.idle.split(",")]
    results = {}
    for _ in range(args.rounds):
        for idle in idles:
            for name, path in binaries.items():
                results.setdefault((name, idle), []).append(measure(path, conf, idle, args.requests))
    lines = [f"# CGI start cost against connections held — {time.strftime('%Y-%m-%d %H:%M')}", "",
             "Command: `" + " ".join(sys.argv) + "`", "", __doc__.split("\n\n    bench/")[0], "",
             f"`ab -k -n {args.requests} -c 4`, {args.rounds} rounds, median.", "",
             "| binary | idle connections | requests/s | server µs CPU per request | failed |",
             "|---|---:|---:|---:|---:|"]
    for idle in idles:
        for name in binaries:
            rs = results[(name, idle)]
            lines.append(f"| {name} | {idle} | {statistics.median(r['rps'] for r in rs):.0f} | "
                         f"{statistics.median(r['us_per_request'] for r in rs):.0f} | "
                         f"{sum(r['failed'] for r in rs)} |")
    write_report(args.out, lines)


if __name__ == "__main__":
    main()
