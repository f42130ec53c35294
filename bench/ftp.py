#!/usr/bin/env python3
"""Anonymous read-only FTP: ramjet against vsftpd and pure-ftpd (Debian packages) in one
run. Every server serves the same tree (/srv/ftp, the `ftp` user's home, which pure-ftpd
requires) on 127.0.0.1, pinned to CPU 0 with everything it forks (ramjet with one worker;
vsftpd and pure-ftpd fork a process per session, and the pin is inherited); the load is
`ramjet bench ftp://...` on CPU 1. Each server runs in its own cgroup (v1 cpuacct and
memory), so its CPU counts every process it forked, exited ones included, and its memory
counts the kernel's part (page tables, process structures, socket memory) as well as user
space. Median of the rounds; the servers' order rotates each round.

Rows:
  logins    -c 1000 sessions at once of connect, USER/PASS anonymous, QUIT, for --duration:
            sessions per second and per server CPU-second, session p99
  retr      20 sessions one after another, each EPSV + RETR of a 100 MB file (the receiver
            drops the bytes in the kernel: recv MSG_TRUNC) and QUIT: Gbit/s and GB per
            server CPU-second
  idle      --idle control connections logged in and held: the server's memory per
            connection (cgroup usage less page cache, and the process tree's PSS)

    bash bench/install-peers.sh    # vsftpd and pure-ftpd among the peers
    python3 bench/ftp.py --rounds 3 --out bench/results/$(date +%F)-ftp
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import procstat  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TREE = Path("/srv/ftp")
PORTS = {"ramjet": 18621, "vsftpd": 18622, "pure-ftpd": 18623}
PASSIVE = {"ramjet": (42000, 42999), "vsftpd": (43000, 43999), "pure-ftpd": (44000, 44999)}
# Unpacked by bench/install-peers.sh (Debian's FTP servers conflict with each other).
VSFTPD = "/opt/peers/vsftpd/usr/sbin/vsftpd"
WORK = Path("/tmp/ramjet-bench/ftp")


def ftp_user():
    """The `ftp` user (anonymous sessions run as it) with /srv/ftp as its home."""
    try:
        home = subprocess.run(["getent", "passwd", "ftp"], capture_output=True, text=True,
                              check=True).stdout.split(":")[5]
    except subprocess.CalledProcessError:
        subprocess.run(["useradd", "--system", "--home-dir", str(TREE), "--no-create-home",
                        "--shell", "/usr/sbin/nologin", "ftp"], check=True)
        return
    if home != str(TREE):
        raise SystemExit(f"the ftp user's home is {home}, not {TREE}: pure-ftpd serves its home")


def make_tree():
    TREE.mkdir(parents=True, exist_ok=True)
    os.chmod(TREE, 0o755)
    big = TREE / "100m.bin"
    if not big.exists() or big.stat().st_size != 100 << 20:
        with open(big, "wb") as f:
            f.write(os.urandom(100 << 20))
    (TREE / "small.txt").write_bytes(b"hello\n")


def server_cmd(name, binary):
    port = PORTS[name]
    lo, hi = PASSIVE[name]
    WORK.mkdir(parents=True, exist_ok=True)
    if name == "ramjet":
        cfg = WORK / "ramjet.toml"
        cfg.write_text(
            f'listen = [{{ address = "127.0.0.1:{port}", protocol = "ftp" }}]\nworkers = 1\n'
            f'[log]\naccess = "off"\n[ftp]\npassive_ports = "{lo}-{hi}"\n'
            f'[[location]]\nroot = "{TREE}"\n')
        return [binary, "serve", "--config", str(cfg)]
    if name == "vsftpd":
        Path("/var/run/vsftpd/empty").mkdir(parents=True, exist_ok=True)
        cfg = WORK / "vsftpd.conf"
        cfg.write_text("\n".join([
            "listen=YES", "listen_ipv6=NO", "listen_address=127.0.0.1", f"listen_port={port}",
            "background=NO", "anonymous_enable=YES", f"anon_root={TREE}", "local_enable=NO", "write_enable=NO", f"pasv_min_port={lo}", f"pasv_max_port={hi}",
            "max_clients=20000", "max_per_ip=0", "xferlog_enable=NO", "use_sendfile=YES",
            "secure_chroot_dir=/var/run/vsftpd/empty", "seccomp_sandbox=NO",
            "idle_session_timeout=600", "ftpd_banner=vsftpd",
            # Its fastest: without a new network namespace (and PID/IPC ones) per session,
            # which its defaults make (isolate, isolate_network). Single trial runs here,
            # not the same load: 285 logins per CPU-second with them (100 at once, 2 s),
            # 440 without (1,000 at once, 3 s).
            "isolate=NO", "isolate_network=NO", ""]))
        return [VSFTPD, str(cfg)]
    # pure-ftpd: anonymous only (the ftp user's home), no uploads, no DNS lookups.
    return ["/usr/sbin/pure-ftpd", "-S", f"127.0.0.1,{port}", "-e", "-i", "-H", "-A", "-4",
            "-c", "20000", "-C", "20000", "-p", f"{lo}:{hi}", "-I", "15"]


def pss_kb(pids):
    """Proportional set size of the processes, KB: shared pages split between them."""
    return procstat.sum_kb(pids, "smaps_rollup", "Pss")


def start(name, binary):
    WORK.mkdir(parents=True, exist_ok=True)
    group = procstat.Group(name)
    log = open(WORK / f"{name}.log", "w")
    proc = subprocess.Popen(group.join_command(server_cmd(name, binary)), stdout=log,
                            stderr=subprocess.STDOUT)
    procstat.wait_port(PORTS[name], proc)
    return proc, group


def stop(proc, group):
    procstat.stop(proc)
    for p in group.pids():
        try:
            os.kill(p, 9)
        except OSError:
            pass
    group.remove()


def bench(binary, args, extra):
    cmd = ["taskset", "-c", "1", binary, "bench", "--json", "--no-progress", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: {out.stdout}{out.stderr}")
    report = json.loads(out.stdout[out.stdout.index("{"):])
    report.update(extra)
    return report


def logins(name, binary, group, duration, concurrency):
    url = f"ftp://127.0.0.1:{PORTS[name]}/"
    cpu0 = group.cpu()
    r = bench(binary, [url, "-c", str(concurrency), "-d", f"{duration}s", "--timeout", "30s"], {})
    r["server_cpu"] = group.cpu() - cpu0
    r["per_cpu"] = r["sessions"] / max(r["server_cpu"], 1e-9)
    return r


def retr(name, binary, group, count):
    url = f"ftp://127.0.0.1:{PORTS[name]}/100m.bin"
    cpu0 = group.cpu()
    r = bench(binary, [url, "-c", "1", "-n", str(count), "--discard-body", "--timeout", "60s"], {})
    r["server_cpu"] = group.cpu() - cpu0
    r["gb_per_cpu"] = r["bytes"] / 1e9 / max(r["server_cpu"], 1e-9)
    return r


def idle(name, binary, group, count):
    url = f"ftp://127.0.0.1:{PORTS[name]}/"
    before, pss_before = group.memory(), pss_kb(group.pids())
    # 32 logins at once: vsftpd listens with a backlog of 32.
    cmd = ["taskset", "-c", "1", binary, "bench", "--hold", "--no-progress", url, "-c", str(count),
           "-d", "600s", "--timeout", "120s", "--connect-concurrency", "32"]
    holder = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = holder.stdout.readline()
    held = int(line.split()[1]) if line.startswith("holding") else 0
    time.sleep(2)
    during, pss_during = group.memory(), pss_kb(group.pids())
    holder.terminate()
    holder.wait()
    return {"held": held, "kb_per_conn": (during - before) / 1024 / max(held, 1),
            "pss_kb_per_conn": (pss_during - pss_before) / max(held, 1),
            "processes": len(group.pids())}


def median(runs, key):
    vals = [r[key] for r in runs if r is not None]
    return statistics.median(vals) if vals else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "target/release/ramjet"))
    ap.add_argument("--servers", default="ramjet,vsftpd,pure-ftpd")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=5, help="seconds per logins run")
    ap.add_argument("--logins", type=int, default=1000, help="sessions at once in the logins row")
    ap.add_argument("--logins-low", type=int, default=32,
                    help="sessions at once in the second logins row (within vsftpd's backlog of 32)")
    ap.add_argument("--retr", type=int, default=20, help="100 MB RETRs per round")
    ap.add_argument("--idle", type=int, default=10000, help="idle control connections held (0: skip)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    servers = args.servers.split(",")
    for s in servers:
        found = {"ramjet": args.bin, "vsftpd": VSFTPD, "pure-ftpd": "/usr/sbin/pure-ftpd"}[s]
        if not os.access(found, os.X_OK):
            raise SystemExit(f"{s} is not installed ({found}): bash bench/install-peers.sh")
    ftp_user()
    make_tree()
    results = {s: {"logins": [], "logins_low": [], "retr": [], "idle": []} for s in servers}
    for rnd in range(args.rounds):
        order = servers[rnd % len(servers):] + servers[:rnd % len(servers)]
        for name in order:
            proc, group = start(name, args.bin)
            try:
                r = logins(name, args.bin, group, args.duration, args.logins)
                results[name]["logins"].append(r)
                print(f"round {rnd} {name} logins: {r['sessions_per_second']:.0f}/s, "
                      f"{r['per_cpu']:.0f}/CPU-s, p99 {r['p99_ms']:.1f} ms, {r['errors']} errors", flush=True)
                r = logins(name, args.bin, group, args.duration, args.logins_low)
                results[name]["logins_low"].append(r)
                print(f"round {rnd} {name} logins at {args.logins_low}: {r['sessions_per_second']:.0f}/s, "
                      f"{r['per_cpu']:.0f}/CPU-s, p99 {r['p99_ms']:.1f} ms, {r['errors']} errors", flush=True)
                r = retr(name, args.bin, group, args.retr)
                results[name]["retr"].append(r)
                print(f"round {rnd} {name} retr: {r['gbit_per_second']:.2f} Gbit/s, "
                      f"{r['gb_per_cpu']:.2f} GB/CPU-s, {r['errors']} errors", flush=True)
                if args.idle and rnd == 0:
                    r = idle(name, args.bin, group, args.idle)
                    results[name]["idle"].append(r)
                    print(f"{name} idle: {r}", flush=True)
            finally:
                stop(proc, group)
            time.sleep(1)
    lines = report(results, servers, args)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "ftp.json").write_text(json.dumps(results, indent=1))
        procstat.write_report(out, lines)
    else:
        print("\n".join(lines))


def report(results, servers, args):
    versions = procstat.tool_versions([["cat", "/opt/peers/vsftpd/VERSION"], ["dpkg-query", "-W", "pure-ftpd"]])
    lines = [
        "# FTP: ramjet vs vsftpd and pure-ftpd", "",
        f"`python3 bench/ftp.py --rounds {args.rounds} --duration {args.duration} --logins {args.logins} "
        f"--logins-low {args.logins_low} --retr {args.retr} --idle {args.idle}`; {', '.join(versions)}; servers on CPU 0 (ramjet one "
        "worker; the others fork per session, pinned with it), `ramjet bench ftp://` on CPU 1; "
        f"median of {args.rounds} rounds; CPU and memory from each server's cgroup.", "",
        "| row | " + " | ".join(servers) + " | ramjet / vsftpd | ramjet / pure-ftpd |",
        "|---|" + "---:|" * (len(servers) + 2),
    ]

    def row(label, kind, key, fmt, higher=True):
        vals = {s: median(results[s][kind], key) for s in servers}
        cells = [fmt.format(vals[s]) if vals[s] is not None else "-" for s in servers]
        ratios = []
        for peer in ("vsftpd", "pure-ftpd"):
            a, b = vals.get("ramjet"), vals.get(peer)
            if a and b:
                ratios.append(f"{(a / b if higher else b / a):.2f}x")
            else:
                ratios.append("-")
        lines.append(f"| {label} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")

    row(f"logins, {args.logins} at once: sessions/s", "logins", "sessions_per_second", "{:,.0f}")
    row("logins per server CPU-second", "logins", "per_cpu", "{:,.0f}")
    row("login session p99, ms (lower is better)", "logins", "p99_ms", "{:.1f}", higher=False)
    row(f"logins, {args.logins_low} at once: sessions/s", "logins_low", "sessions_per_second", "{:,.0f}")
    row("logins per server CPU-second", "logins_low", "per_cpu", "{:,.0f}")
    row("login session p99, ms (lower is better)", "logins_low", "p99_ms", "{:.1f}", higher=False)
    row("RETR 100 MB, Gbit/s", "retr", "gbit_per_second", "{:.2f}")
    row("RETR 100 MB, GB per server CPU-second", "retr", "gb_per_cpu", "{:.2f}")
    if args.idle:
        row(f"{args.idle} idle sessions: KB each, cgroup (lower is better)", "idle", "kb_per_conn", "{:.1f}",
            higher=False)
        row("the same, PSS of the processes (lower is better)", "idle", "pss_kb_per_conn", "{:.1f}",
            higher=False)
    errors = {s: sum(r["errors"] for k in ("logins", "logins_low", "retr") for r in results[s][k]) for s in servers}
    lines += ["", "pure-ftpd holds at most 500 sessions whatever `-c` says (it answers 421 past that): its idle "
              "row is per session of those it held."] if "pure-ftpd" in servers else []
    lines += ["", "Errors over all runs: " + ", ".join(f"{s} {n}" for s, n in errors.items()) + "."]
    if args.idle:
        held = {s: results[s]["idle"][0]["held"] if results[s]["idle"] else 0 for s in servers}
        procs = {s: results[s]["idle"][0]["processes"] if results[s]["idle"] else 0 for s in servers}
        lines.append("Idle sessions held: " + ", ".join(f"{s} {held[s]} ({procs[s]} processes)" for s in servers)
                     + ".")
    return lines


if __name__ == "__main__":
    main()
