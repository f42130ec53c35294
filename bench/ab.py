#!/usr/bin/env python3
"""A/B of two ramjet binaries on the static hot path, in one run: each server alone on CPU 0
(one worker), `ramjet bench` on CPU 1, rounds alternating which binary goes first, median
of the rounds. Reports req/s and requests per server-CPU-second (from /proc/PID/stat).

    python3 bench/ab.py --a OLD_BINARY --b NEW_BINARY --rounds 3 --duration 5 --out REPORT.md
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import congestion  # same directory: the kernel's TCP congestion control

TICK = os.sysconf("SC_CLK_TCK")
PORT = 18190

# name, path, connections, extra `ramjet bench` flags
PROFILES = [
    ("0B c50", "/empty.bin", 50, []),
    ("4KB c50", "/4k.bin", 50, []),
    ("4KB pipelined x4 c50", "/4k.bin", 50, ["--pipeline", "4"]),
    # A new connection per request: accept, the connection's task and its registration.
    ("4KB no keep-alive c50", "/4k.bin", 50, ["--no-keepalive"]),
    ("21.5KB c50 (sendfile)", "/21k.bin", 50, []),
    ("100KB c50 (sendfile)", "/100k.bin", 50, []),
    # Large files: the body dropped in the client's kernel (recv MSG_TRUNC), so the
    # server's sending sets the pace; the figure to read is the server CPU per request.
    ("100MB x4 (discarding receiver)", "/100m.bin", 4, ["--discard-body"]),
    ("100MB x4 (copying receiver)", "/100m.bin", 4, []),
    # One download alone: no other connection's send to overlap with.
    ("100MB x1 (discarding receiver)", "/100m.bin", 1, ["--discard-body"]),
    ("100MB x1 (copying receiver)", "/100m.bin", 1, []),
]
FILES = {"empty.bin": 0, "4k.bin": 4096, "21k.bin": 22_016, "100k.bin": 100_000,
         "100m.bin": 100 << 20}


def cpu_ticks(pid):
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def start(binary, www):
    p = subprocess.Popen(["taskset", "-c", "0", binary, "serve", str(www), "--listen", f"127.0.0.1:{PORT}",
                          "--workers", "1", "--access-log", "off"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/4k.bin", timeout=1).read()
            return p
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise SystemExit(f"{binary} did not start")


def run(load, binary, www, profile, duration):
    name, path, conns, extra = profile
    srv = start(binary, www)
    try:
        subprocess.run(["taskset", "-c", "1", load, "bench", "-c", str(conns), "-d", "1s", *extra,
                        f"http://127.0.0.1:{PORT}{path}"], check=True, capture_output=True, timeout=60)
        t0 = cpu_ticks(srv.pid)
        out = subprocess.run(["taskset", "-c", "1", load, "bench", "-c", str(conns), "-d", f"{duration}s",
                              "--json", *extra, f"http://127.0.0.1:{PORT}{path}"],
                             check=True, capture_output=True, text=True, timeout=duration + 60).stdout
        cpu = (cpu_ticks(srv.pid) - t0) / TICK
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=15)
        except subprocess.TimeoutExpired:
            # Before issue 11 a server spinning on a 0-byte file also ignored TERM.
            srv.kill()
            srv.wait()
    r = json.loads(out)
    errors = r["errors"]["total"]
    return {"rps": r["requests_per_sec"], "cpu": cpu, "per_cpu": r["responses"] / cpu if cpu else 0,
            "errors": errors}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="baseline binary")
    ap.add_argument("--b", required=True, help="candidate binary")
    ap.add_argument("--load", help="binary whose `bench` generates the load (default: --b)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--out")
    ap.add_argument("--profiles", default="all", help="comma list of profile names, or all")
    ap.add_argument("--congestion", default="",
                    help="TCP congestion control for this run (e.g. cubic, bbr); restored after. Empty: as set")
    args = ap.parse_args()
    with congestion.use(args.congestion):
        ab(args)


def ab(args):
    load = args.load or args.b
    www = Path(tempfile.mkdtemp(prefix="ramjet-ab-"))
    for name, size in FILES.items():
        (www / name).write_bytes(os.urandom(size))
    profiles = [p for p in PROFILES if args.profiles == "all" or p[0] in args.profiles.split(",")]
    res = {p[0]: {"a": [], "b": []} for p in profiles}
    for rnd in range(args.rounds):
        order = ["a", "b"] if rnd % 2 == 0 else ["b", "a"]
        for profile in profiles:
            for which in order:
                binary = args.a if which == "a" else args.b
                res[profile[0]][which].append(run(load, binary, www, profile, args.duration))
    lines = [f"A = `{args.a}`, B = `{args.b}`; {args.rounds} rounds of {args.duration} s, median;",
             "one worker on CPU 0, `ramjet bench` on CPU 1; TCP congestion control `" + congestion.current() + "`.", "",
             "| profile | A req/s | B req/s | B/A | A req/server-CPU-s | B req/server-CPU-s | B/A | errors A/B | spread A / B |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in res.items():
        med = {w: (statistics.median(x["rps"] for x in r[w]), statistics.median(x["per_cpu"] for x in r[w]))
               for w in "ab"}
        spread = {w: (max(x["rps"] for x in r[w]) - min(x["rps"] for x in r[w])) / max(med[w][0], 1) * 100
                  for w in "ab"}
        errs = {w: sum(x["errors"] for x in r[w]) for w in "ab"}
        ratio = [f"{med['b'][i] / med['a'][i]:.3f}" if med["a"][i] else "-" for i in (0, 1)]
        lines.append(f"| {name} | {med['a'][0]:,.0f} | {med['b'][0]:,.0f} | {ratio[0]} | "
                     f"{med['a'][1]:,.0f} | {med['b'][1]:,.0f} | {ratio[1]} | "
                     f"{errs['a']}/{errs['b']} | {spread['a']:.1f}% / {spread['b']:.1f}% |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
