#!/usr/bin/env python3
"""Where the server CPU goes under SPECweb99: each server at one fixed load (below its
limit), `perf record -C 0 -g` over the middle of the run, then CPU 0's time split by what
it was doing. Same servers, configuration, client and file set as bench/specweb.py (whose
file set it uses, or makes).

The split is by inclusive share of CPU 0's samples (a syscall includes the network
softirq work it triggered: on loopback, sending runs the receiving side's TCP input on
the sender's CPU, so CPU 0 also pays for much of the client's receive path):

    idle, the CGI programs (Perl), each syscall's share, the loopback receive processing
    (net_rx_action) wherever it ran, and user space of the server processes.

    bench/specweb_profile.py --out bench/results/$(date +%F)-specweb-profile --servers ramjet,nginx -c 3000
"""
import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procstat import cpu_busy, stop, tree_cpu, write_report  # noqa: E402
import specweb  # noqa: E402

SYSCALLS = ["sendfile64", "sendmsg", "sendto", "recvfrom", "readv", "read",
            "epoll_wait", "epoll_ctl", "accept4", "close", "openat", "openat2", "newfstat",
            "statx", "setsockopt", "futex", "fdatasync", "execve", "clone3", "wait4",
            "cachestat", "inotify_add_watch", "pipe2"]
KERNEL = ["do_writev", "do_execveat_common.isra.0", "net_rx_action", "tcp_sendmsg_locked", "splice_to_socket", "do_close_on_exec",
          "dnotify_flush", "__schedule"]


def perf_shares(data, comms):
    """Inclusive share (% of CPU 0's samples) of each syscall and kernel function, over the
    samples of `comms` (the server's threads and the programs it runs)."""
    out = subprocess.run(["perf", "report", "-i", str(data), "--children", "--sort", "sym",
                          "--stdio", "-g", "none", "--comms", ",".join(comms)],
                         capture_output=True, text=True).stdout
    shares = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+([\d.]+)%\s+\[(.)\]\s+(\S+)", line)
        if m:
            shares.setdefault(m.group(4), (float(m.group(1)), m.group(3)))
    return shares


def comm_shares(data):
    out = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", "comm",
                          "--stdio", "-g", "none"], capture_output=True, text=True).stdout
    return {m.group(2): float(m.group(1)) for m in
            (re.match(r"\s*([\d.]+)%\s+(\S.*?)\s*$", l) for l in out.splitlines()) if m}


def user_share(data, comms):
    """Share of CPU 0's samples in user space of these comms."""
    out = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", "comm,dso",
                          "--stdio", "-g", "none", "--comms", ",".join(comms)],
                         capture_output=True, text=True).stdout
    total = 0.0
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\S+\s+(\S+)", line)
        if m and "kernel" not in m.group(2):
            total += float(m.group(1))
    return total


def profile(name, args, work, hi):
    start, dynamic = specweb.SERVERS[name]
    procs = start(work)
    data = Path(args.perf_dir) / f"perf-{name}.data"
    try:
        total = args.warmup + args.run + 2
        client = subprocess.Popen(
            ["taskset", "-c", "1", str(specweb.RAMJET), "specweb", "run",
             f"http://127.0.0.1:{specweb.PORT}", "--dynamic", dynamic, "--cgi",
             "/cgi-bin/specweb99-cgi.pl", "--fileset-connections", str(hi), "-c", str(args.c),
             "--warmup", f"{args.warmup}s", "--run", f"{args.run}s", "--rampdown", "2s",
             "--iterations", "1", "-t1", "--json"], stdout=subprocess.PIPE, text=True)
        time.sleep(args.warmup)
        pids = [p.pid for p in procs]
        cpu0, busy0, t0 = tree_cpu(pids), cpu_busy(0), time.time()
        subprocess.run(["perf", "record", "-q", "-C", "0", "-g", "-o", str(data), "--",
                        "sleep", str(args.seconds)], check=True, stderr=subprocess.DEVNULL)
        cpu1, busy1, t1 = tree_cpu(pids), cpu_busy(0), time.time()
        out, _ = client.communicate(timeout=total + 120)
        result = json.loads(out)
    finally:
        stop(*procs)
    comms = comm_shares(data)
    server_comms = [c for c in comms if c != "swapper" and not c.startswith(("kworker", "ksoftirqd",
                                                                             "perf", "kdamond"))]
    shares = perf_shares(data, server_comms)
    own = [c for c in server_comms if not c.startswith("specweb99")]
    ops = result["median"]["ops_per_sec"]
    return {
        "name": name, "connections": args.c, "ops_per_sec": ops,
        "conforming": result["conforming"],
        "server_util": (cpu1 - cpu0) / (t1 - t0), "cpu0_busy": (busy1 - busy0) / (t1 - t0),
        "us_per_op": (cpu1 - cpu0) / (t1 - t0) / ops * 1e6,
        "comms": comms, "user": user_share(data, own),
        "syscalls": {s: shares.get(f"__x64_sys_{s}", (0.0, "k"))[0] for s in SYSCALLS},
        "kernel": {k: shares.get(k, (0.0, "k"))[0] for k in KERNEL},
    }


def report(runs, args):
    names = [r["name"] for r in runs]
    lines = [f"# Where CPU 0 goes under SPECweb99 — {time.strftime('%Y-%m-%d %H:%M')}", "",
             "Command: `" + " ".join(sys.argv) + "`", "", __doc__.split("\n\n    bench/")[0], "",
             f"{args.c} connections; perf over {args.seconds} s after a {args.warmup} s warm-up; "
             f"{args.rounds} rounds per server, the split shown from the round with the median "
             "CPU per operation.", "",
             "| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(runs)]

    def row(label, f):
        lines.append(f"| {label} | " + " | ".join(f(r) for r in runs) + " |")
    row("ops/s", lambda r: f"{r['ops_per_sec']:.0f}")
    row("conforming", lambda r: str(r["conforming"]))
    row("server processes' CPU (of CPU 0)", lambda r: f"{r['server_util'] * 100:.0f}%")
    row("CPU 0 busy", lambda r: f"{r['cpu0_busy'] * 100:.0f}%")
    row("server µs per op", lambda r: f"{r['us_per_op']:.1f}")
    row("idle (samples)", lambda r: f"{r['comms'].get('swapper', 0):.1f}%")
    row("server µs per op, each round", lambda r: ", ".join(f"{u:.1f}" for u in r["rounds"]))
    row("user space of the server (not the CGI programs)", lambda r: f"{r['user']:.1f}%")
    row("CGI programs (Perl, own comm)", lambda r: f"{sum(v for k, v in r['comms'].items() if k.startswith('specweb99')):.1f}%")
    for k in KERNEL:
        row(f"`{k}` (incl.)", lambda r, k=k: f"{r['kernel'][k]:.1f}%")
    for s in SYSCALLS:
        if any(r["syscalls"][s] >= 0.1 for r in runs):
            row(f"`{s}` (incl.)", lambda r, s=s: f"{r['syscalls'][s]:.1f}%")
    by = {r["name"]: r for r in runs}
    if "ramjet" in by:
        r = by["ramjet"]
        busy = 100 - r["comms"].get("swapper", 0)
        floor = busy - r["user"]
        lines += ["", f"ramjet's CPU 0 samples outside idle: {busy:.1f}%; without any of its own "
                  f"user-space time (a server costing nothing itself): {floor:.1f}%."]
        for p in runs:
            if p["name"] != "ramjet":
                pb = (100 - p["comms"].get("swapper", 0)) * r["ops_per_sec"] / p["ops_per_sec"]
                lines.append(f"- {p['name']} at the same ops/s: {pb:.1f}%; so at most "
                             f"{pb / floor:.2f}x its operations per CPU-second for any user-space "
                             f"server on this kernel path (ramjet now: {pb / busy:.2f}x).")
    lines += ["", "Threads and processes on CPU 0 (share of samples):", ""]
    for r in runs:
        lines.append(f"- {r['name']}: " + ", ".join(f"{k} {v:.1f}%" for k, v in r["comms"].items() if v >= 0.3))
    return lines + [""]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--servers", default="ramjet,nginx")
    ap.add_argument("-c", type=int, default=3000, help="connections (below every server's limit)")
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--run", type=int, default=20)
    ap.add_argument("--seconds", type=int, default=10, help="perf record time, within the run")
    ap.add_argument("--rounds", type=int, default=3, help="runs per server, alternating; the "
                    "one with the median CPU per operation is shown")
    ap.add_argument("--work", default="/var/tmp/ramjet-specweb")
    ap.add_argument("--perf-dir", default="/tmp", help="where perf's data files are kept")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "ramjet", "--bin", "ramjet"],
                   cwd=specweb.ROOT, check=True)
    work = Path(args.work)
    (work / "data").mkdir(parents=True, exist_ok=True)
    www = work / "www"
    # A marker names the load the set in www was made for (bench/specweb.py leaves one
    # with --keep-fileset); without the set itself it means nothing.
    sets = sorted(int(p.name.split("-")[1]) for p in work.glob("fileset-*"))
    if not (www / "file_set").is_dir():
        for n in sets:
            (work / f"fileset-{n}").unlink()
        sets = []
    hi = next((n for n in sets if n >= args.c), None)
    if hi is None:
        hi = args.c
        subprocess.run([str(specweb.RAMJET), "specweb", "fileset", "--no-progress", "-c", str(hi),
                        str(www)], check=True)
        (work / f"fileset-{hi}").write_text("")
    rounds = {s: [] for s in args.servers.split(",")}
    for _ in range(args.rounds):
        for s in rounds:
            rounds[s].append(profile(s, args, work, hi))
    runs = []
    for s, rs in rounds.items():
        # The round with the median CPU per operation gives the split.
        med = sorted(rs, key=lambda r: r["us_per_op"])[len(rs) // 2]
        med["rounds"] = [r["us_per_op"] for r in rs]
        runs.append(med)
    lines = report(runs, args)
    (out / "result.json").write_text(json.dumps(runs, indent=1))
    write_report(out, lines)


if __name__ == "__main__":
    main()
