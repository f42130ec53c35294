#!/usr/bin/env python3
"""SPECweb99 on this machine: the most conforming connections each server sustains, found
by `ramjet specweb run --find-max`, then the median of 3 iterations at that load. Same
client, same file set, same machine, one run.

Servers (`--servers`, default ramjet):
  ramjet  one worker: static files, the dynamic share in-process (`module = "specweb99"`),
          the CGI share through integrations/specweb99/specweb99-cgi.pl.
  ramjet-wasm  the same, the dynamic share from the WebAssembly component instead
          (`wasm/specweb99`, `module = "wasm"`, its post log a granted journal); with it in
          the list every ramjet runs the build with `--features wasm`.
  nginx   one worker serving the static share, forwarding the dynamic and CGI shares to a
          ramjet instance (one worker) running the module and the CGI (pooled upstream
          connections, replies buffered in memory).
  apache  Apache 2.4, event MPM: static files, and the whole dynamic share as CGI
          (mod_cgid: integrations/specweb99/specweb99-dynamic.pl and specweb99-cgi.pl, a
          new Perl process per dynamic request), as a server without a module API runs it.

Every server process (and every CGI process they start) is pinned to CPU 0; the client
(`ramjet specweb run -t1`) to CPU 1. The file set is generated for the top of the highest
search range (`ramjet specweb fileset`) and its size reported against RAM (a set that fits
in the page cache is the "cached" condition; a range whose set exceeds RAM gives the
uncached one). Reports conforming connections, ops/s, the per-class table, and the server
side's CPU (utime+stime of its processes and their children, from /proc) per operation,
so where the limit came from shows.

    bench/specweb.py --out bench/results/$(date +%F)-specweb --range 500:4000:100 [--run 20] [--iterations 3]
    bench/specweb.py --out DIR --servers ramjet,nginx,apache --range ramjet=4000:5600:200,nginx=1000:5000:200,apache=20:1000:20
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procstat import APACHE_MODULES, apache_conf_head, stop, tree_cpu, wait_port  # noqa: E402
from procstat import start_apache as start_apache_process  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RAMJET = ROOT / "target/release/ramjet"
PORT = 18820
BACKEND_PORT = 18821
CGI_DIR = ROOT / "integrations/specweb99"
GUESTS = ROOT / "wasm/target/wasm32-wasip2/release"


def mem_total_gib():
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / (1 << 20)
    return 0.0


def many_files():
    """Room for every connection and nginx's open-file cache (this machine's default is
    20,000 descriptors; root may raise it)."""
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (200_000, 200_000))
    except (ValueError, OSError):
        pass


def ramjet_conf(work, port, name, wasm=False):
    www, data = work / "www", work / "data"
    conf = work / f"{name}.toml"
    if wasm:
        # The same workload from the WebAssembly component built from the native module's
        # source, mounted in its place.
        module = (f'[[location]]\npath = "/specweb99"\nmodule = "wasm"\n'
                  f'[location.module_config]\ncomponent = "{GUESTS}/specweb99.wasm"\n'
                  f'files = {{ set = "{www}" }}\njournals = {{ posts = "{data}/posts" }}\n')
    else:
        module = (f'[[location]]\npath = "/specweb99"\nmodule = "specweb99"\n'
                  f'[location.module_config]\nroot = "{www}"\ndata_dir = "{data}"\n')
    conf.write_text(
        f'listen = ["127.0.0.1:{port}"]\nworkers = 1\n[log]\naccess = "off"\n'
        f'[limits]\nmax_connections = 100000\n'
        f'[[location]]\nroot = "{www}"\n' + module +
        f'[[location]]\npath = "/cgi-bin/"\ncgi_root = "{CGI_DIR}"\n'
        f'cgi_env = {{ SPECWEB_ROOT = "{www}" }}\n')
    return conf


def start_ramjet(work, port, name, wasm=False):
    proc = subprocess.Popen(["taskset", "-c", "0", str(RAMJET), "serve", "--config",
                             str(ramjet_conf(work, port, name, wasm))], stderr=subprocess.DEVNULL,
                            preexec_fn=many_files)
    wait_port(port, proc)
    return proc


def start_nginx(work):
    backend = start_ramjet(work, BACKEND_PORT, "backend")
    conf = work / "nginx.conf"
    (work / "nginx").mkdir(exist_ok=True)
    conf.write_text(f"""worker_processes 1;
daemon off;
master_process off;
worker_rlimit_nofile 200000;
error_log {work}/nginx/error.log;
pid {work}/nginx/nginx.pid;
events {{ worker_connections 100000; multi_accept on; }}
http {{
  access_log off;
  sendfile on; tcp_nopush on; tcp_nodelay on;
  open_file_cache max=10000 inactive=60s; open_file_cache_valid 60s; open_file_cache_errors on;
  keepalive_requests 100000; keepalive_timeout 60s;
  client_body_temp_path {work}/nginx/body;
  proxy_temp_path {work}/nginx/proxy;
  default_type application/octet-stream;
  upstream ramjet {{ server 127.0.0.1:{BACKEND_PORT}; keepalive 256; }}
  server {{
    listen 127.0.0.1:{PORT} reuseport backlog=4096;
    root {work}/www;
    location /specweb99 {{
      proxy_pass http://ramjet; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_buffers 16 64k; proxy_busy_buffers_size 128k;
    }}
    location /cgi-bin/ {{
      proxy_pass http://ramjet; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_buffers 16 64k; proxy_busy_buffers_size 128k; proxy_read_timeout 60s;
    }}
  }}
}}
""")
    proc = subprocess.Popen(["taskset", "-c", "0", "nginx", "-c", str(conf), "-e",
                             str(work / "nginx/error.log")], preexec_fn=many_files)
    wait_port(PORT, proc)
    return [proc, backend]


def start_apache(work):
    m = APACHE_MODULES
    d = work / "apache"
    d.mkdir(exist_ok=True)
    user = ""
    if os.geteuid() == 0:
        # The CGI writes the post log and the tables as Apache's user.
        user = "User www-data\nGroup www-data\n"
        shutil.chown(work / "data", "www-data", "www-data")
        for f in (work / "data").iterdir():
            shutil.chown(f, "www-data", "www-data")
        shutil.chown(d, "www-data", "www-data")
    conf = d / "httpd.conf"
    conf.write_text(
        apache_conf_head(d, PORT, user) +
        f"LoadModule mpm_event_module {m}/mod_mpm_event.so\n"
        f"LoadModule cgid_module {m}/mod_cgid.so\nScriptSock {d}/cgid.sock\n"
        f'DocumentRoot "{work}/www"\n'
        f'ScriptAlias /cgi-bin/ "{CGI_DIR}/"\n'
        f'SetEnv SPECWEB_ROOT "{work}/www"\nSetEnv SPECWEB_DATA "{work}/data"\n'
        f'<Directory "{work}/www">\n  Require all granted\n</Directory>\n'
        f'<Directory "{CGI_DIR}">\n  Require all granted\n</Directory>\n'
        "EnableSendfile On\nKeepAlive On\nMaxKeepAliveRequests 0\nKeepAliveTimeout 60\n"
        "Timeout 60\nListenBacklog 4096\n"
        # Enough threads that Apache's limit is its CPU, not its thread count: every
        # connection can be in a request at once.
        "ServerLimit 16\nStartServers 16\nThreadLimit 512\nThreadsPerChild 512\n"
        "MaxRequestWorkers 8192\nMinSpareThreads 1\nMaxSpareThreads 8192\n"
        "MaxConnectionsPerChild 0\n")
    return [start_apache_process(conf, PORT, preexec_fn=many_files)]


SERVERS = {
    "ramjet": (lambda w: [start_ramjet(w, PORT, "ramjet")], "/specweb99"),
    "ramjet-wasm": (lambda w: [start_ramjet(w, PORT, "ramjet-wasm", wasm=True)], "/specweb99"),
    "nginx": (start_nginx, "/specweb99"),
    "apache": (start_apache, "/cgi-bin/specweb99-dynamic.pl"),
}


def measure(name, rng, hi, args, work):
    start, dynamic = SERVERS[name]
    procs = start(work)
    try:
        client = ["taskset", "-c", "1", str(RAMJET), "specweb", "run", f"http://127.0.0.1:{PORT}",
                  "--dynamic", dynamic, "--cgi", "/cgi-bin/specweb99-cgi.pl",
                  "--fileset-connections", str(hi), "--warmup", f"{args.warmup}s",
                  "--run", f"{args.run}s", "--rampdown", f"{args.rampdown}s", "-t1", "--json"]
        started = time.time()
        if ":" in rng:
            search = subprocess.run(client + ["--find-max", rng, "--iterations", "1"],
                                    capture_output=True, text=True)
            if search.returncode != 0:
                return {"name": name, "range": rng, "error": search.stderr.strip()[-3000:]}
            found = json.loads(search.stdout)["median"]["connections"]
        else:
            # A load given, not searched for: the iterations at that load only.
            search = subprocess.CompletedProcess([], 0, "", f"(no search: {rng} connections given)")
            found = int(rng)
        pids = [p.pid for p in procs]
        cpu0 = tree_cpu(pids)
        client0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        final = subprocess.run(client + ["-c", str(found), "--iterations", str(args.iterations)],
                               capture_output=True, text=True)
        cpu1 = tree_cpu(pids)
        client1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if final.returncode != 0:
            return {"name": name, "range": rng, "error": final.stderr.strip()[-3000:]}
        result = json.loads(final.stdout)
    finally:
        stop(*procs)
    client_cpu = (client1.ru_utime + client1.ru_stime) - (client0.ru_utime + client0.ru_stime)
    total_secs = args.iterations * (args.warmup + args.run + args.rampdown)
    ops = sum(i["ops"] for i in result["iterations"])
    # The CPU covers warm-ups and ramp-downs too; ops counts the measured intervals only,
    # so CPU per op is scaled by the measured share of the time.
    return {
        "name": name, "range": rng, "found": found, "result": result,
        "search": search.stderr, "elapsed": time.time() - started,
        "server_util": (cpu1 - cpu0) / total_secs,
        "client_util": client_cpu / total_secs,
        "us_per_op": (cpu1 - cpu0) / max(ops, 1) * 1e6 * args.run
        / (args.warmup + args.run + args.rampdown),
    }


def report(runs, args, dirs, set_gib):
    lines = [f"# SPECweb99: {', '.join(r['name'] for r in runs)} — {time.strftime('%Y-%m-%d %H:%M')}", "",
             "Command: `" + " ".join(sys.argv) + "`", "", __doc__.split("\n\n    bench/")[0], "",
             f"File set: {dirs} directories, {set_gib:.1f} GiB; RAM {mem_total_gib():.1f} GiB "
             f"({'cached: fits in the page cache' if set_gib < mem_total_gib() * 0.8 else 'larger than the page cache'}).",
             f"Warm-up {args.warmup} s, run {args.run} s, ramp-down {args.rampdown} s; the search "
             f"probes once per load, then {args.iterations} iterations at the load found.", "",
             "| server | search range | conforming (median) | at connections | valid | ops/s | server CPU (CPU 0) | server µs per op | client CPU (CPU 1) |",
             "|---|---|---:|---:|---|---:|---:|---:|---:|"]
    failed = [r for r in runs if "error" in r]
    runs = [r for r in runs if "error" not in r]
    best_peer = max((r["result"]["conforming"] for r in runs
                     if not r["name"].startswith("ramjet")), default=0)
    for r in failed:
        lines.append(f"| {r['name']} | {r['range']} | no result: see below | | | | | | |")
    for r in runs:
        res, m = r["result"], r["result"]["median"]
        lines.append(f"| {r['name']} | {r['range']} | {res['conforming']} | {r['found']} | "
                     f"{'VALID' if res['valid'] else 'INVALID'} | {m['ops_per_sec']:.0f} | "
                     f"{r['server_util'] * 100:.0f}% | {r['us_per_op']:.0f} | {r['client_util'] * 100:.0f}% |")
    ramjet = next((r for r in runs if r["name"] == "ramjet"), None)
    if ramjet and best_peer:
        lines += ["", f"ramjet / best peer, conforming connections: "
                  f"{ramjet['result']['conforming'] / best_peer:.2f}x"]
        for r in runs:
            if not r["name"].startswith("ramjet"):
                lines.append(f"- {r['name']}: server µs per op {r['us_per_op']:.0f} vs ramjet "
                             f"{ramjet['us_per_op']:.0f} ({r['us_per_op'] / ramjet['us_per_op']:.2f}x)")
    wasm = next((r for r in runs if r["name"] == "ramjet-wasm"), None)
    if ramjet and wasm:
        w, n = wasm["result"]["median"], ramjet["result"]["median"]
        lines += ["", "WebAssembly module / native module: conforming connections "
                  f"{wasm['result']['conforming'] / max(ramjet['result']['conforming'], 1):.2f}x, "
                  f"ops/s {w['ops_per_sec'] / max(n['ops_per_sec'], 1):.2f}x, server µs per op "
                  f"{wasm['us_per_op']:.0f} vs {ramjet['us_per_op']:.0f} "
                  f"({ramjet['us_per_op'] / wasm['us_per_op']:.2f}x the native's ops per CPU-second)"]
    for r in runs:
        res, m = r["result"], r["result"]["median"]
        lines += ["", f"## {r['name']}", "", f"Search and runs took {r['elapsed']:.0f} s. Search probes:", "",
                  "```", r["search"].strip(), "```", "",
                  "| iteration | connections | conforming | ops/s | valid | reasons |",
                  "|---|---:|---:|---:|---|---|"]
        for k, i in enumerate(res["iterations"]):
            lines.append(f"| {k + 1} | {i['connections']} | {i['conforming']} | {i['ops_per_sec']:.0f} | "
                         f"{i['valid']} | {'; '.join(i['reasons'])} |")
        lines += ["", "Median iteration, per class:", "", "| class | ops | errors | share | target |",
                  "|---|---:|---:|---:|---:|"]
        for c in m["classes"]:
            lines.append(f"| {c['class']} | {c['ops']} | {c['errors']} | {c['share']:.3f} | {c['target_share']:.2f} |")
        lines += ["", "| request type | ops | errors | share |", "|---|---:|---:|---:|"]
        for o in m["ops_by_type"]:
            lines.append(f"| {o['op']} | {o['ops']} | {o['errors']} | {o['share']:.4f} |")
        lines += ["", "Conforming at speed limits (kbit/s): " +
                  ", ".join(f"{l // 1000}: {n}" for l, n in m["conformance"])]
    for r in failed:
        lines += ["", f"## {r['name']}: no result", "", "```", r["error"], "```"]
    return lines + [""]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--servers", default="ramjet")
    ap.add_argument("--range", default="500:4000:100",
                    help="LO:HI[:STEP] for --find-max, or NAME=LO:HI[:STEP],... per server; "
                         "a single number instead of LO:HI skips the search")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--run", type=int, default=20)
    ap.add_argument("--rampdown", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--work", default="/var/tmp/ramjet-specweb")
    ap.add_argument("--keep-fileset", action="store_true")
    ap.add_argument("--fileset", type=int, help="the load to make the file set for "
                    "(default: the top of the highest range)")
    args = ap.parse_args()
    servers = args.servers.split(",")
    if "=" in args.range:
        ranges = dict(p.split("=", 1) for p in args.range.split(","))
    else:
        ranges = {s: args.range for s in servers}
    for s in servers:
        if s not in SERVERS or s not in ranges:
            raise SystemExit(f"unknown server or no range for it: {s}")
    hi = args.fileset or max(int(ranges[s].split(":")[1 if ":" in ranges[s] else 0]) for s in servers)
    # With the WebAssembly host when a server needs it (then every server runs that build).
    wasm = ["--features", "wasm"] if "ramjet-wasm" in servers else []
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "ramjet", "--bin", "ramjet"]
                   + wasm, cwd=ROOT, check=True)
    if wasm:
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT / "wasm", check=True)
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
    runs = []
    for s in servers:
        runs.append(measure(s, ranges[s], hi, args, work))
        r = runs[-1]
        print(f"{s}: {r['error'] if 'error' in r else r['result']['conforming']}", file=sys.stderr)
    lines = report(runs, args, dirs, set_gib)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text("\n".join(lines))
    (out / "result.json").write_text(json.dumps(runs, indent=1))
    print("\n".join(lines))
    if not args.keep_fileset:
        shutil.rmtree(www, ignore_errors=True)
        marker.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
