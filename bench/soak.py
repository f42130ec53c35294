#!/usr/bin/env python3
"""Soak: ramjet under a mixed load for a while (hours in production terms, scaled down),
with configuration reloads and access-log rotations, and a verdict.

The load, all at once, from `ramjet bench` (each a separate client process):
- static files, open loop: a weighted mix of 4 KB, 100 KB, an empty file and a listing
  (every answer must be 2xx or 3xx: `ramjet bench` counts any other status as an error);
- the reverse proxy, open loop, to a second ramjet serving a 4 KB file;
- a CGI program, open loop;
- slow downloads (`--slow`): each longer than `timeouts.keepalive`, then asked for again
  on the same connection, which is what apt, wget and lftp do over a slow link (every one
  of them ended in a reset before the keep-alive timeout was counted from the end of the
  response).

Meanwhile: a reload (HUP) every `--reload` seconds, a log rotation (rename, USR1) every
`--rotate` seconds, RSS, descriptors and threads sampled every `--sample` seconds.

Verdict (exit status 1 if any fails): no error of any kind in any client (connect,
timeout, reset, status, short body, invalid); RSS flat (over the second half of the run it
grows by at most `--rss-growth`: the first half includes pools and the allocator
settling); descriptors after the load no more than
under it (cached files and pooled connections aside, nothing left behind); the server stops with status 0 and logged no panic and no ERROR line.

  bench/soak.py --seconds 600 --out bench/results/$(date +%F)-soak
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import procstat  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def rss_kb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def threads(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def errors_of(report):
    """Total errors of a `ramjet bench --json` report, and the non-zero kinds."""
    errs = report.get("errors", {})
    kinds = {k: v for k, v in errs.items() if isinstance(v, int) and v and k != "total"}
    return sum(kinds.values()), kinds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=str(ROOT / "target/release/ramjet"))
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--out", required=True)
    ap.add_argument("--port", type=int, default=19400)
    ap.add_argument("--keepalive", default="10s", help="the server's timeouts.keepalive")
    ap.add_argument("--slow", type=int, default=50, help="slow downloads held")
    ap.add_argument("--throttle", default="2Mbit", help="each slow download's read rate")
    ap.add_argument("--big", type=int, default=4 << 20, help="slow downloads' file size")
    ap.add_argument("--rate", type=int, default=5000, help="static requests per second")
    ap.add_argument("--reload", type=int, default=60)
    ap.add_argument("--rotate", type=int, default=300)
    ap.add_argument("--sample", type=int, default=15)
    ap.add_argument("--rss-growth", type=float, default=0.05,
                    help="most RSS growth over the second half of the run")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ramjet-soak-"))
    www, cgi, backend = work / "www", work / "cgi", work / "backend"
    for d in (www / "dir", cgi, backend):
        d.mkdir(parents=True)
    (www / "4k.bin").write_bytes(os.urandom(4096))
    (www / "100k.bin").write_bytes(os.urandom(100 * 1024))
    (www / "big.bin").write_bytes(os.urandom(args.big))
    (www / "empty.txt").write_bytes(b"")
    for i in range(200):
        (www / "dir" / f"f{i}.txt").write_text(f"{i}\n")
    (backend / "x").write_bytes(os.urandom(4096))
    hello = cgi / "hello"
    hello.write_text('#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\nhello %s\\n" "$QUERY_STRING"\n')
    hello.chmod(0o755)
    port, bport = args.port, args.port + 1
    (work / "backend.toml").write_text(
        f'listen = ["127.0.0.1:{bport}"]\nworkers = 1\n[log]\naccess = "off"\n'
        f'[[location]]\npath = "/app/"\nroot = "{backend}"\nproxy_path = "/"\n'
        f'[[location]]\nroot = "{backend}"\n')
    config = (
        f'listen = ["127.0.0.1:{port}"]\nworkers = 2\n[timeouts]\nkeepalive = "{args.keepalive}"\n'
        f'[log]\naccess = "{work}/access.log"\n'
        f'[upstream.app]\nservers = ["127.0.0.1:{bport}"]\n'
        f'[[location]]\npath = "/app/"\nproxy = "app"\nproxy_path = "/"\n'
        f'[[location]]\npath = "/cgi-bin/"\ncgi_root = "{cgi}"\n'
        f'[[location]]\npath = "/metrics"\nhandlers = ["metrics"]\n'
        f'[[location]]\nroot = "{www}"\nautoindex = true\n')
    (work / "ramjet.toml").write_text(config)
    err = open(out / "serve.log", "w")
    be = subprocess.Popen([args.bin, "serve", "--config", str(work / "backend.toml")],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rj = subprocess.Popen([args.bin, "serve", "--config", str(work / "ramjet.toml")],
                          stdout=subprocess.DEVNULL, stderr=err)
    procstat.wait_port(port, rj)
    procstat.wait_port(bport, be)
    u = f"http://127.0.0.1:{port}"
    (work / "urls").write_text(
        f"{u}/4k.bin 20\n{u}/100k.bin 4\n{u}/empty.txt 1\n{u}/dir/ 1\n")
    fds_before = fds(rj.pid)
    d = f"{args.seconds}s"
    loads = {
        "static": [args.bin, "bench", "--urls-file", str(work / "urls"), "--rate",
                   str(args.rate), "-c", "100", "-d", d, "--json"],
        "proxy": [args.bin, "bench", "--rate", str(args.rate // 3), "-c", "50", "-d", d,
                  "--json", f"{u}/app/x"],
        "cgi": [args.bin, "bench", "--rate", "20", "-c", "4", "-d", d, "--json",
                f"{u}/cgi-bin/hello?x=1"],
        "slow": [args.bin, "bench", "--slow", "-c", str(args.slow), "--throttle",
                 args.throttle, "-d", d, "--json", f"{u}/big.bin"],
    }
    procs = {k: subprocess.Popen(v, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k, v in loads.items()}
    samples = []
    start = time.time()
    next_sample = start + args.sample
    next_reload, next_rotate = start + args.reload, start + args.rotate
    reloads = rotations = 0
    while any(p.poll() is None for p in procs.values()):
        now = time.time()
        if now >= next_sample:
            samples.append((round(now - start), rss_kb(rj.pid), fds(rj.pid), threads(rj.pid),
                            procstat.proc_cpu(rj.pid)))
            next_sample += args.sample
        if now >= next_reload:
            rj.send_signal(signal.SIGHUP)
            reloads += 1
            next_reload += args.reload
        if now >= next_rotate:
            os.rename(work / "access.log", work / "access.log.1")
            rj.send_signal(signal.SIGUSR1)
            rotations += 1
            next_rotate += args.rotate
        time.sleep(0.2)
    reports = {}
    for k, p in procs.items():
        so, se = p.communicate()
        try:
            reports[k] = json.loads(so)
        except json.JSONDecodeError:
            reports[k] = {"errors": {"unparsed": 1}, "stderr": se[-2000:]}
    # Idle again (past the upstream pool's 4 s keep-alive): what the server holds now is
    # what it keeps.
    time.sleep(6)
    fds_after, rss_after = fds(rj.pid), rss_kb(rj.pid)
    procstat.stop(rj, be)
    err.close()
    log = (out / "serve.log").read_text(errors="replace")
    bad_lines = [l for l in log.splitlines() if "panicked" in l or " ERROR " in l]
    warm = [s for s in samples if s[0] >= min(60, args.seconds // 4)] or samples
    # Flat means no growth that goes on: the first half of a run includes the pools, the
    # caches and the allocator's arenas settling (measured: +1.6 MB in the first 5 minutes,
    # +0.1 MB in the last 2 of 15); a leak grows the second half as much as the first.
    half = [s for s in samples if s[0] >= args.seconds // 2] or samples
    first_rss, last_rss = half[0][1], half[-1][1]
    growth = (last_rss - first_rss) / max(first_rss, 1)
    lines = [f"# Soak: {args.seconds} s", "",
             f"Command: `bench/soak.py {' '.join(sys.argv[1:])}`", "",
             f"Server: 2 workers, `timeouts.keepalive = {args.keepalive}`; slow downloads: "
             f"{args.slow} x {args.big} B at {args.throttle} each (longer than the "
             f"keep-alive timeout, then asked for again on the same connection); "
             f"{reloads} reloads, {rotations} log rotations.", "",
             "| load | requests | errors | kinds |", "|---|---:|---:|---|"]
    failed = []
    for k, r in reports.items():
        n, kinds = errors_of(r)
        done = r.get("responses", f"{r.get('established', '-')} held, {r.get('bytes', 0) >> 20} MiB")
        lines.append(f"| {k} | {done} | {n} | {kinds or ''} |")
        if n:
            failed.append(f"{k}: {n} errors {kinds}")
    lines += ["", "| t (s) | RSS (KB) | fds | threads | CPU (s) |", "|---:|---:|---:|---:|---:|"]
    lines += [f"| {t} | {r} | {f} | {th} | {c:.1f} |" for t, r, f, th, c in samples]
    lines += ["", f"RSS {warm[0][1]} KB at {warm[0][0]} s (warmed up), {first_rss} KB at "
              f"{half[0][0]} s (half-way), {last_rss} KB at {half[-1][0]} s: {growth:+.1%} over "
              f"the second half; after the load {rss_after} KB.",
              f"Descriptors: {fds_before} before the load, {warm[0][2]} at {warm[0][0]} s under "
              f"load, {fds_after} after it.",
              f"Server exit status {rj.returncode}; panic or ERROR lines: {len(bad_lines)}."]
    if growth > args.rss_growth:
        failed.append(f"RSS grew {growth:.1%}")
    # Open files cached and pooled connections are held while the load runs; afterwards
    # no more than at the first sample under load may be left (a leak grows past it).
    if fds_after > warm[0][2]:
        failed.append(f"descriptors {warm[0][2]} under load -> {fds_after} after it")
    if rj.returncode != 0:
        failed.append(f"exit status {rj.returncode}")
    if bad_lines:
        failed.append(f"log: {bad_lines[:3]}")
    lines += ["", "Verdict: " + ("PASS" if not failed else "FAIL: " + "; ".join(failed))]
    (out / "clients.json").write_text(json.dumps(reports, indent=1))
    procstat.write_report(out, lines)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
