#!/usr/bin/env python3
"""SPECweb99 on this machine: the most conforming connections ramjet sustains with the
in-process module (`module = "specweb99"`) and the CGI share through
integrations/specweb99/specweb99-cgi.pl, found by `ramjet specweb run --find-max`.

ramjet runs one worker pinned to CPU 0; the client (`ramjet specweb run -t1`) is pinned to
CPU 1. The file set is generated for the top of the search range (`ramjet specweb
fileset`), and its size is reported against RAM (a set that fits in the page cache is the
"cached" condition; pass a range whose set exceeds RAM for the uncached one). Reports
conforming connections, ops/s, the per-class table, and ramjet's CPU per operation
(utime+stime from /proc over the final iterations) so where the limit came from shows.

    bench/specweb.py --out bench/results/$(date +%F)-specweb --range 500:4000:100 [--run 20] [--iterations 3]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RAMJET = ROOT / "target/release/ramjet"
PORT = 18820
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """The process's CPU and its reaped children's (the CGI processes)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICK


def mem_total_gib():
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / (1 << 20)
    return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--range", default="500:4000:100", help="LO:HI[:STEP] for --find-max")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--run", type=int, default=20)
    ap.add_argument("--rampdown", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--work", default="/var/tmp/ramjet-specweb")
    args = ap.parse_args()
    hi = int(args.range.split(":")[1])
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "ramjet", "--bin", "ramjet"],
                   cwd=ROOT, check=True)
    work = Path(args.work)
    (work / "data").mkdir(parents=True, exist_ok=True)
    www = work / "www"
    marker = work / f"fileset-{hi}"
    if not marker.exists():
        subprocess.run([str(RAMJET), "specweb", "fileset", "--no-progress", "-c", str(hi), str(www)],
                       check=True)
        marker.write_text("")
    dirs = sum(1 for _ in (www / "file_set").iterdir())
    set_gib = dirs * 5_119_484 / (1 << 30)
    cgi_dir = ROOT / "integrations/specweb99"
    conf = work / "ramjet.toml"
    conf.write_text(
        f'listen = ["127.0.0.1:{PORT}"]\nworkers = 1\n[log]\naccess = "off"\n'
        f'[limits]\nmax_connections = 100000\n'
        f'[[location]]\nroot = "{www}"\n'
        f'[[location]]\npath = "/specweb99"\nmodule = "specweb99"\n'
        f'[location.module_config]\nroot = "{www}"\ndata_dir = "{work}/data"\n'
        f'[[location]]\npath = "/cgi-bin/"\ncgi_root = "{cgi_dir}"\n'
        f'cgi_env = {{ SPECWEB_ROOT = "{www}" }}\n')
    server = subprocess.Popen(["taskset", "-c", "0", str(RAMJET), "serve", "--config", str(conf)],
                              stderr=subprocess.DEVNULL)
    try:
        time.sleep(1)
        client = ["taskset", "-c", "1", str(RAMJET), "specweb", "run", f"http://127.0.0.1:{PORT}",
                  "--cgi", "/cgi-bin/specweb99-cgi.pl", "--fileset-connections", str(hi),
                  "--warmup", f"{args.warmup}s", "--run", f"{args.run}s",
                  "--rampdown", f"{args.rampdown}s", "-t1", "--json"]
        started = time.time()
        search = subprocess.run(client + ["--find-max", args.range, "--iterations", "1"],
                                capture_output=True, text=True)
        if search.returncode != 0:
            raise SystemExit(search.stderr)
        found = json.loads(search.stdout)["median"]["connections"]
        cpu0 = cpu_seconds(server.pid)
        client0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        final = subprocess.run(client + ["-c", str(found), "--iterations", str(args.iterations)],
                               capture_output=True, text=True)
        cpu1 = cpu_seconds(server.pid)
        client1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        client_cpu = (client1.ru_utime + client1.ru_stime) - (client0.ru_utime + client0.ru_stime)
        if final.returncode != 0:
            raise SystemExit(final.stderr)
        result = json.loads(final.stdout)
        elapsed = time.time() - started
    finally:
        server.terminate()
        server.wait()
    its = result["iterations"]
    ops = sum(i["ops"] for i in its)
    # Ops over the measured intervals only; the CPU covers warm-ups and ramp-downs too,
    # so this over-states CPU per op a little.
    total_secs = args.iterations * (args.warmup + args.run + args.rampdown)
    rate_all = ops / args.run / len(its)
    cpu_util = (cpu1 - cpu0) / total_secs
    m = result["median"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# SPECweb99 (ramjet, module + CGI) — {time.strftime('%Y-%m-%d %H:%M')}", "",
             "Command: `" + " ".join(sys.argv) + "`", "", __doc__.split("\n\n    bench/")[0], "",
             f"File set: {dirs} directories, {set_gib:.1f} GiB; RAM {mem_total_gib():.1f} GiB "
             f"({'cached: fits in the page cache' if set_gib < mem_total_gib() * 0.8 else 'larger than the page cache'}).",
             f"Search and runs took {elapsed:.0f} s; the search's probes are in search.txt.", "",
             f"**Result: {result['conforming']} conforming connections** (median of {len(its)} at "
             f"{found} connections), {'VALID' if result['valid'] else 'INVALID'}; "
             f"{m['ops_per_sec']:.0f} ops/s.", "",
             f"ramjet CPU (1 worker, with its CGI processes): {cpu_util * 100:.0f}% of CPU 0 over the "
             f"final iterations (warm-ups and ramp-downs included), about "
             f"{(cpu1 - cpu0) / max(ops, 1) * 1e6 * args.run / (args.warmup + args.run + args.rampdown):.0f} "
             f"µs per operation; the client: {client_cpu / total_secs * 100:.0f}% of CPU 1.", "",
             "| iteration | connections | conforming | ops/s | valid | reasons |", "|---|---:|---:|---:|---|---|"]
    for k, i in enumerate(its):
        lines.append(f"| {k + 1} | {i['connections']} | {i['conforming']} | {i['ops_per_sec']:.0f} | "
                     f"{i['valid']} | {'; '.join(i['reasons'])} |")
    lines += ["", "Median iteration, per class:", "", "| class | ops | errors | share | target |",
              "|---|---:|---:|---:|---:|"]
    for c in m["classes"]:
        lines.append(f"| {c['class']} | {c['ops']} | {c['errors']} | {c['share']:.3f} | {c['target_share']:.2f} |")
    lines += ["", "| request type | ops | errors | share |", "|---|---:|---:|---:|"]
    for r in m["ops_by_type"]:
        lines.append(f"| {r['op']} | {r['ops']} | {r['errors']} | {r['share']:.4f} |")
    lines += ["", "Conforming at speed limits (kbit/s): " +
              ", ".join(f"{l // 1000}: {n}" for l, n in m["conformance"]), ""]
    (out / "report.md").write_text("\n".join(lines))
    (out / "search.txt").write_text(search.stderr)
    (out / "result.json").write_text(json.dumps(result, indent=1))
    print("\n".join(lines))
    print(search.stderr)


if __name__ == "__main__":
    main()
