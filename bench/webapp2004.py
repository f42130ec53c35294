#!/usr/bin/env python3
"""The 2004 web-application test, redone: a Perl CGI (integrations/webapp2004/products.pl)
runs one SELECT against a real MariaDB (Debian package) returning 97 rows of 8 columns, one
of them an image, and renders them as an HTML table. `ab` drives it; the same script runs
under each server, so what differs is only how the server runs a CGI program.

Servers (`--servers`):
  ramjet          one worker, `cgi_root` (fork/exec of the program, output streamed).
  apache-prefork  Apache 2.4, prefork MPM with mod_cgi: the 2004 configuration.
  apache-event    Apache 2.4, event MPM with mod_cgid (what Debian uses with a threaded MPM).

The server, the CGI processes and MariaDB are pinned to CPU 0; `ab` to CPU 1. For each
concurrency, the median of the rounds: requests per second, and the server side's CPU per
request (server + CGI processes + MariaDB, utime+stime from /proc), and CPU 0's busy time
per request (/proc/stat: counts CGI processes whatever reaps them; mod_cgid's daemon lets
the kernel reap its children, so their CPU is missing from the per-process figure).

    bench/webapp2004.py --out bench/results/$(date +%F)-webapp2004 [--rounds 3] [--duration 10] [--concurrency 1,8,32]
"""
import argparse
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import time
import urllib.request
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procstat import APACHE_MODULES as MODS, apache_conf_head, cpu_busy, stop, tree_cpu, wait_port, write_report  # noqa: E402
from procstat import start_apache as start_apache_process  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RAMJET = ROOT / "target/release/ramjet"
APP = ROOT / "integrations/webapp2004"
PORT = 18830
ROWS, CATEGORY = 97, "garden"


def png(seed):
    """A 48x48 RGB image, different for each row (a few KB, like a product thumbnail)."""
    w = h = 48
    raw = b"".join(b"\0" + bytes(c for x in range(w) for c in
                                 ((x * seed + y * 7) % 256, (y * seed) % 256, (x + y + seed) % 256))
                   for y in range(h))

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def sql():
    """1000 products in ten categories; exactly 97 in `garden`."""
    cats = ["books", "tools", "toys", "food", "music", "shoes", "games", "paint", "lamps", "rugs"]
    out = ["CREATE DATABASE webapp2004;", "USE webapp2004;",
           "CREATE TABLE products (id INT PRIMARY KEY, sku VARCHAR(16) NOT NULL, "
           "name VARCHAR(80) NOT NULL, category VARCHAR(32) NOT NULL, price DECIMAL(8,2) NOT NULL, "
           "stock INT NOT NULL, updated DATETIME NOT NULL, thumbnail BLOB NOT NULL, "
           "KEY (category)) ENGINE=InnoDB;"]
    for i in range(1, 1001):
        cat = CATEGORY if i % 10 == 3 and i < 970 else cats[i % 10]
        out.append(
            f"INSERT INTO products VALUES ({i}, 'SKU-{i:06d}', 'Product {i} <{cat}> & co', '{cat}', "
            f"{(i * 37) % 10000 / 100:.2f}, {(i * 13) % 500}, "
            f"'2004-{1 + i % 12:02d}-{1 + i % 28:02d} 12:{i % 60:02d}:00', X'{png(i).hex()}');")
    out += ["CREATE USER 'webapp'@'localhost' IDENTIFIED BY 'webapp';",
            "GRANT SELECT ON webapp2004.* TO 'webapp'@'localhost';"]
    return "\n".join(out) + "\n"


def start_mariadb(work):
    data, sock = work / "mysql", work / "mysqld.sock"
    fresh = not (data / "webapp2004").exists()
    if fresh:
        shutil.rmtree(data, ignore_errors=True)
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                        "--skip-test-db", "--auth-root-authentication-method=socket"],
                       check=True, stdout=subprocess.DEVNULL)
    proc = subprocess.Popen(["taskset", "-c", "0", "mariadbd", "--no-defaults", f"--datadir={data}",
                             f"--socket={sock}", "--skip-networking", "--user=root",
                             f"--pid-file={work}/mysqld.pid", f"--log-error={work}/mysqld.err",
                             "--innodb-buffer-pool-size=128M", "--max-connections=1000"])
    end = time.time() + 60
    while not sock.exists():
        if proc.poll() is not None or time.time() > end:
            raise SystemExit(f"mariadbd did not start: see {work}/mysqld.err")
        time.sleep(0.1)
    if fresh:
        subprocess.run(["mariadb", "--no-defaults", "-S", str(sock), "-u", "root"],
                       input=sql().encode(), check=True)
    return proc, sock


def env_vars(sock):
    return {"WEBAPP_SOCKET": str(sock), "WEBAPP_DB": "webapp2004", "WEBAPP_USER": "webapp",
            "WEBAPP_PASSWORD": "webapp"}


def start_ramjet(work, sock):
    conf = work / "ramjet.toml"
    env = ", ".join(f'{k} = "{v}"' for k, v in env_vars(sock).items())
    conf.write_text(f'listen = ["127.0.0.1:{PORT}"]\nworkers = 1\n[log]\naccess = "off"\n'
                    f'[[location]]\nroot = "{work}"\n'
                    f'[[location]]\npath = "/cgi-bin/"\ncgi_root = "{APP}"\ncgi_env = {{ {env} }}\n')
    proc = subprocess.Popen(["taskset", "-c", "0", str(RAMJET), "serve", "--config", str(conf)],
                            stderr=subprocess.DEVNULL)
    wait_port(PORT, proc)
    return proc


def start_apache(work, sock, mpm):
    d = work / f"apache-{mpm}"
    d.mkdir(exist_ok=True)
    user = "User www-data\nGroup www-data\n" if os.geteuid() == 0 else ""
    if mpm == "prefork":
        mods = (f"LoadModule mpm_prefork_module {MODS}/mod_mpm_prefork.so\n"
                f"LoadModule cgi_module {MODS}/mod_cgi.so\n"
                "StartServers 40\nMinSpareServers 40\nMaxSpareServers 80\nServerLimit 256\n"
                "MaxRequestWorkers 256\n")
    else:
        mods = (f"LoadModule mpm_event_module {MODS}/mod_mpm_event.so\n"
                f"LoadModule cgid_module {MODS}/mod_cgid.so\nScriptSock {d}/cgid.sock\n"
                "StartServers 2\nServerLimit 4\nThreadsPerChild 64\nMaxRequestWorkers 256\n")
    env = "".join(f'SetEnv {k} "{v}"\n' for k, v in env_vars(sock).items())
    if user:
        shutil.chown(d, "www-data", "www-data")
    conf = d / "httpd.conf"
    conf.write_text(
        apache_conf_head(d, PORT, user) + mods +
        f'DocumentRoot "{work}"\nScriptAlias /cgi-bin/ "{APP}/"\n{env}'
        f'<Directory "{APP}">\n  Require all granted\n</Directory>\n'
        "KeepAlive On\nListenBacklog 4096\n")
    return start_apache_process(conf, PORT)


def start(name, work, sock):
    if name == "ramjet":
        return start_ramjet(work, sock)
    return start_apache(work, sock, name.split("-")[1])


def ab(url, concurrency, duration):
    out = subprocess.run(["taskset", "-c", "1", "ab", "-q", "-t", str(duration), "-n", "1000000",
                          "-c", str(concurrency), url], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"ab: {out.stderr}")

    def field(name, kind=float):
        m = re.search(rf"^{name}:\s+([\d.]+)", out.stdout, re.M)
        return kind(m.group(1)) if m else None
    non2xx = field("Non-2xx responses", int) or 0
    return {"rps": field("Requests per second"), "complete": field("Complete requests", int),
            "failed": field("Failed requests", int) + non2xx,
            "doc_len": field("Document Length", int),
            "ms_mean": field("Time per request")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--servers", default="ramjet,apache-prefork,apache-event")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--work", default="/var/tmp/ramjet-webapp")
    args = ap.parse_args()
    servers = args.servers.split(",")
    levels = [int(c) for c in args.concurrency.split(",")]
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "ramjet", "--bin", "ramjet"],
                   cwd=ROOT, check=True)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    db, sock = start_mariadb(work)
    url = f"http://127.0.0.1:{PORT}/cgi-bin/products.pl"
    results, pages = {}, {}
    try:
        for name in servers:
            proc = start(name, work, sock)
            try:
                page = urllib.request.urlopen(url, timeout=30).read()
                pages[name] = page
                if page.count(b"<tr><td>") != ROWS:
                    raise SystemExit(f"{name}: the page holds {page.count(b'<tr><td>')} rows")
                for c in levels:
                    for r in range(args.rounds):
                        cpu0, busy0 = tree_cpu([proc.pid, db.pid]), cpu_busy(0)
                        got = ab(url, c, args.duration)
                        n = max(got["complete"], 1)
                        got["cpu_us"] = (tree_cpu([proc.pid, db.pid]) - cpu0) / n * 1e6
                        got["cpu0_us"] = (cpu_busy(0) - busy0) / n * 1e6
                        results.setdefault((name, c), []).append(got)
                        print(f"{name} c{c} round {r + 1}: {got}", file=sys.stderr)
            finally:
                stop(proc)
    finally:
        stop(db)
    same = len({p for p in pages.values()}) == 1
    size = len(next(iter(pages.values())))
    lines = [f"# The 2004 web-application test — {time.strftime('%Y-%m-%d %H:%M')}", "",
             "Command: `" + " ".join(sys.argv) + "`", "", __doc__.split("\n\n    bench/")[0], "",
             f"The page: {ROWS} rows of 8 columns, {size} bytes; "
             f"{'identical from every server' if same else 'DIFFERENT between servers'}. "
             f"`ab -t {args.duration} -c C` per round, {args.rounds} rounds, medians.", "",
             "| concurrency | server | req/s | mean ms | server+CGI+DB CPU µs/req | CPU 0 busy µs/req | failed | ramjet's req/s over this |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for c in levels:
        base = statistics.median(r["rps"] for r in results[(servers[0], c)])
        for name in servers:
            rs = results[(name, c)]
            rps = statistics.median(r["rps"] for r in rs)
            lines.append(f"| {c} | {name} | {rps:.1f} | {statistics.median(r['ms_mean'] for r in rs):.1f} | "
                         f"{statistics.median(r['cpu_us'] for r in rs):.0f} | {statistics.median(r['cpu0_us'] for r in rs):.0f} | "
                         f"{sum(r['failed'] for r in rs)} | "
                         f"{base / rps:.2f}x |")
    lines += ["", "Rounds:", ""]
    for (name, c), rs in results.items():
        lines.append(f"- {name} c{c}: " + ", ".join(f"{r['rps']:.1f} req/s ({r['cpu_us']:.0f} µs)" for r in rs))
    write_report(args.out, lines)


if __name__ == "__main__":
    main()
