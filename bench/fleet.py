#!/usr/bin/env python3
"""A caching fleet on one machine (issue 26): HAProxy in front of three cache nodes that
pull from one origin, every process in a network namespace of its own on a bridge this
script creates (nothing outside the machine is touched), and a client namespace driving a
Zipf workload over an object set larger than one node's cache.

    client ──► HAProxy (balance uri, hash-type consistent, PROXY v2, GET /health)
                 ├─► node1 ┐
                 ├─► node2 ├─► origin (ramjet serving files,
                 ├─► node3 ┘    Cache-Control: max-age=M, stale-if-error=600)
                 └─► node4 (disabled until the "join" phase)

The ramjet nodes, the origin and HAProxy run the files under packaging/fleet/ as shipped,
their @PLACEHOLDERS@ filled in.

The nodes are ramjet (`[cache]` with a disk tier, `identity` per node, `max_conns` to the
origin, `timeouts.drain`, the `health` handler) or, for comparison, nginx `proxy_cache`
(`proxy_cache_lock`, `proxy_cache_use_stale`, `proxy_cache_revalidate`) in the same
topology with the same budgets. Phases, one run per server kind:

1. steady: Zipf load with three nodes. Origin body bytes against the sizes of the distinct
   objects asked for (every object pulled once: within 1%).
2. kill: mid-phase, one node is killed with SIGKILL and restarted. Client errors (HAProxy
   retries and health checks should leave none), and which objects the origin sent more
   than once: they should all be the killed node's. Then another node is stopped
   gracefully (TERM; QUIT for nginx) and started again: client errors, and why HAProxy
   took it out (ramjet's health check answers 503 while it drains).
3. join: a fourth node is enabled (HAProxy runtime API). The share of objects whose node
   changed (consistent hashing: about 1/4).
4. origin down: the origin is stopped for `--origin-down` seconds while clients ask for the
   objects already cached (fresh ones, and stale ones within stale-if-error). Client errors.

Usage (as root; `ip netns`, HAProxy and nginx from Debian):

    bench/fleet.py --out bench/results/$(date +%F)-fleet [--servers ramjet,nginx]
    bench/fleet.py --check        # short phases, ramjet only, JSON on stdout (the test's)
"""
import argparse
import bisect
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import procstat  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NET = "10.231.7"
LB, CLIENT, ORIGIN = f"{NET}.5", f"{NET}.6", f"{NET}.2"
NODES = {f"node{i}": f"{NET}.{10 + i}" for i in range(1, 5)}
PACKAGING = ROOT / "packaging/fleet"
PORT = 8080
OBJECT_MIN, OBJECT_MAX = 1 << 10, 64 << 10


# ---------------------------------------------------------------- the client (a namespace)

def zipf_picker(n, s, seed):
    """A function giving object indexes with Zipf(s) frequencies (0 the most asked)."""
    weights = [1.0 / (k + 1) ** s for k in range(n)]
    total, acc, cum = sum(weights), 0.0, []
    for w in weights:
        acc += w
        cum.append(acc / total)
    rng = random.Random(seed)
    return lambda: min(bisect.bisect_left(cum, rng.random()), n - 1)


def node_of(resp):
    """Which node answered: ramjet's Cache-Status identity, or nginx's X-Node."""
    x = resp.getheader("X-Node")
    if x:
        return x
    cs = resp.getheader("Cache-Status") or ""
    return cs.split(";", 1)[0].strip() or "?"


def drive(args):
    """Run in the client namespace: `--threads` keep-alive clients for `--seconds`, each
    request a Zipf pick (or, with `--keys`, a pick among those names only); every answer
    checked (status 200, the object's length). JSON on stdout."""
    sizes = json.loads(Path(args.manifest).read_text())
    names = sorted(sizes)
    if args.keys:
        names = json.loads(Path(args.keys).read_text())
    lock = threading.Lock()
    out = {"requests": 0, "errors": 0, "error_samples": [], "statuses": {}, "seen": {},
           "stale": 0}
    end = time.time() + args.seconds

    def record(name, status, node, error=None, stale=False):
        with lock:
            out["requests"] += 1
            out["stale"] += stale
            out["statuses"][str(status)] = out["statuses"].get(str(status), 0) + 1
            if error:
                out["errors"] += 1
                if len(out["error_samples"]) < 20:
                    out["error_samples"].append(f"{time.time():.3f} {name}: {error}")
            else:
                out["seen"][name] = node

    def one(i):
        pick = zipf_picker(len(names), args.zipf, seed=args.seed * 1000 + i)
        conn = None
        while time.time() < end:
            name = names[pick()]
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(LB, 80, timeout=30)
                conn.request("GET", f"/o/{name}")
                resp = conn.getresponse()
                body = resp.read()
                node = node_of(resp)
                if resp.status != 200:
                    record(name, resp.status, node, f"status {resp.status} from {node}")
                elif len(body) != sizes[name]:
                    record(name, 200, node, f"{len(body)} of {sizes[name]} bytes from {node}")
                else:
                    # Served stale (the origin down): ramjet's Cache-Status, nginx's word.
                    stale = "stale-if-error" in (resp.getheader("Cache-Status") or "") \
                        or resp.getheader("X-Cache") == "STALE"
                    record(name, 200, node, stale=stale)
                if resp.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                record(name, 0, "", f"{type(e).__name__}: {e}")
                if conn is not None:
                    conn.close()
                conn = None

    threads = [threading.Thread(target=one, args=(i,)) for i in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    json.dump(out, sys.stdout)


def map_keys(args):
    """Run in the client namespace: ask once for each name (all cached already) and say
    which node answered. JSON on stdout."""
    names = json.loads(Path(args.keys).read_text())
    conn = http.client.HTTPConnection(LB, 80, timeout=30)
    nodes = {}
    for name in names:
        conn.request("GET", f"/o/{name}")
        resp = conn.getresponse()
        resp.read()
        nodes[name] = node_of(resp)
    json.dump(nodes, sys.stdout)


# ---------------------------------------------------------------- the topology (root)

class Fleet:
    """The namespaces, the bridge and the processes of one run."""

    def __init__(self, work, tag):
        self.work = work
        self.tag = tag
        self.spaces = []
        self.procs = {}

    def ns(self, name):
        return f"rjf{self.tag}-{name}"

    def ip(self, *args):
        subprocess.run(["ip", *args], check=True)

    def build(self):
        hub = self.ns("hub")
        self.ip("netns", "add", hub)
        self.spaces.append(hub)
        self.ip("-n", hub, "link", "add", "br0", "type", "bridge")
        self.ip("-n", hub, "link", "set", "br0", "up")
        hosts = {"lb": LB, "client": CLIENT, "origin": ORIGIN, **NODES}
        for i, (name, addr) in enumerate(hosts.items()):
            space = self.ns(name)
            self.ip("netns", "add", space)
            self.spaces.append(space)
            self.ip("-n", hub, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0",
                    "netns", space)
            self.ip("-n", hub, "link", "set", f"p{i}", "master", "br0", "up")
            self.ip("-n", space, "addr", "add", f"{addr}/24", "dev", "eth0")
            self.ip("-n", space, "link", "set", "eth0", "up")
            self.ip("-n", space, "link", "set", "lo", "up")

    def start(self, name, cmd, log):
        """Start `cmd` in host `name`'s namespace, in a process group of its own."""
        f = open(log, "ab")
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(name), *cmd], stdout=f, stderr=f,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs[name] = p
        return p

    def kill(self, name, sig=signal.SIGKILL):
        p = self.procs.pop(name, None)
        if p is None:
            return
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    def cpu(self, names):
        """CPU seconds used so far by the processes of these hosts."""
        return procstat.tree_cpu([self.procs[n].pid for n in names if n in self.procs])

    def run_in(self, name, cmd, timeout):
        r = subprocess.run(["ip", "netns", "exec", self.ns(name), *cmd], capture_output=True,
                           timeout=timeout)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} in {name}: {r.stderr.decode()[-2000:]}")
        return r.stdout

    def wait_up(self, name, addr, path="/health", within=20):
        """Until `addr` answers `path` below 500, asked from the LB's namespace (the
        client's for the LB itself); a node is asked with a PROXY header, as HAProxy does."""
        port = 80 if name == "lb" else PORT
        proxy = f"PROXY TCP4 {LB} {addr} 40000 {port}\r\n" if name in NODES else ""
        ask = f"{proxy}GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode()
        code = ("import socket,sys,time\n"
                f"end=time.time()+{within}\n"
                "while time.time()<end:\n"
                "  try:\n"
                f"    s=socket.create_connection(('{addr}',{port}),timeout=2)\n"
                f"    s.sendall({ask!r})\n"
                "    line=s.recv(64).split(b' ')\n"
                "    if len(line)>1 and int(line[1])<500: sys.exit(0)\n"
                "  except (OSError, ValueError): pass\n"
                "  time.sleep(0.05)\n"
                "sys.exit(1)\n")
        asker = "client" if name == "lb" else "lb"
        r = subprocess.run(["ip", "netns", "exec", self.ns(asker), sys.executable, "-c", code])
        p = self.procs.get(name)
        if r.returncode != 0 or (p is not None and p.poll() is not None):
            raise SystemExit(f"{name} did not come up; see {self.work}")

    def teardown(self):
        for name in list(self.procs):
            self.kill(name)
        for space in reversed(self.spaces):
            subprocess.run(["ip", "netns", "del", space], stderr=subprocess.DEVNULL)
        self.spaces = []


def make_objects(root, count, seed=26):
    """`count` files of 1 to 64 KiB (log-uniform) under root/o; their sizes by name."""
    rng = random.Random(seed)
    (root / "o").mkdir(parents=True, exist_ok=True)
    sizes = {}
    for i in range(count):
        n = int(OBJECT_MIN * (OBJECT_MAX / OBJECT_MIN) ** rng.random())
        name = f"{i:05d}.bin"
        data = (name.encode() * (n // len(name) + 1))[:n]
        (root / "o" / name).write_bytes(data)
        sizes[name] = n
    return sizes


def template(file, **values):
    """packaging/fleet/FILE with its @PLACEHOLDERS@ filled: the fleet runs the shipped files."""
    text = (PACKAGING / file).read_text()
    for k, v in values.items():
        text = text.replace(f"@{k.upper()}@", str(v))
    if "@" in "".join(line.split("#")[0] for line in text.splitlines()):
        raise SystemExit(f"packaging/fleet/{file}: a placeholder is left unfilled")
    return text


def origin_config(work, max_age):
    return template("origin.toml", origin=f"{ORIGIN}:{PORT}", root=work / "objects",
                    max_age=max_age, access_log=work / "origin-access.log")


def ramjet_node(work, name, addr, budget):
    text = template("node.toml", name=name, listen=f"{addr}:{PORT}",
                    origin=f"{ORIGIN}:{PORT}", cache_dir=work / f"cache-{name}",
                    disk_size=budget, memory=budget // 4)
    # One worker per node here (four nodes share two CPUs), and no access log.
    return "workers = 1\n" + text + '\n[log]\naccess = "off"\n'


def nginx_node(work, name, addr, budget):
    conf = work / f"nginx-{name}"
    conf.mkdir(exist_ok=True)
    return conf, procstat.nginx_conf_head(conf) + f"""http {{
  access_log off;
  proxy_temp_path {conf}/tmp;
  client_body_temp_path {conf}/body;
  proxy_cache_path {work}/cache-{name} levels=1:2 keys_zone=c:{budget // 4} max_size={budget}
                   inactive=1d use_temp_path=off;
  upstream origin {{ server {ORIGIN}:{PORT} max_conns=16; keepalive 32; }}
  server {{
    listen {addr}:{PORT} proxy_protocol;
    location = /health {{ return 200 "ok\\n"; }}
    location / {{
      proxy_pass http://origin;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_cache c;
      proxy_cache_key $uri$is_args$args;
      proxy_cache_lock on;
      proxy_cache_lock_timeout 30s;
      proxy_cache_lock_age 30s;
      proxy_cache_revalidate on;
      proxy_cache_use_stale error timeout http_500 http_502 http_503 http_504 updating;
      add_header X-Node {name} always;
      add_header X-Cache $upstream_cache_status always;
    }}
  }}
}}
"""


def haproxy_config(work):
    nodes = {f"node{i}": f"{a}:{PORT}" for i, a in enumerate(NODES.values(), 1)}
    return template("haproxy.cfg", stats_socket=work / "haproxy.sock", front=f"{LB}:80",
                    **nodes)


def haproxy_cmd(work, command):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(work / "haproxy.sock"))
        s.sendall(command.encode() + b"\n")
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    return reply.decode()


def origin_fetches(log, settle=True):
    """The origin's 200 answers, in order: (object name, asking node's address, body bytes).
    ramjet writes its access log out once a second: with `settle`, the file is read once it
    has not changed for longer than that (the end of a phase)."""
    out = []
    if not log.exists():
        return out
    end = time.time() + 10
    while settle and time.time() - log.stat().st_mtime < 1.3 and time.time() < end:
        time.sleep(0.1)
    for line in log.read_text().splitlines():
        try:
            v = json.loads(line)
        except ValueError:
            continue
        if v.get("status") == 200:
            name = v["request"].split()[1].rsplit("/", 1)[-1]
            out.append((name, v.get("remote", ""), v.get("bytes", 0)))
    return out


def counted(fetches):
    counts = {}
    for name, _, _ in fetches:
        counts[name] = counts.get(name, 0) + 1
    return counts, sum(b for _, _, b in fetches)


class Run:
    """One fleet of one server kind, through the four phases."""

    def __init__(self, kind, args, work, sizes):
        self.kind, self.args, self.work, self.sizes = kind, args, work, sizes
        self.fleet = Fleet(work, f"{os.getpid() % 100000}{kind[0]}")
        self.bin = args.bin

    def start_origin(self):
        conf = self.work / "origin.toml"
        conf.write_text(origin_config(self.work, self.args.max_age))
        self.fleet.start("origin", [self.bin, "serve", "--config", str(conf)],
                         self.work / "origin.err")
        # Not an object: the origin's log counts objects pulled by the nodes only.
        self.fleet.wait_up("origin", ORIGIN, path="/")

    def start_node(self, name):
        addr = NODES[name]
        budget = self.args.node_cache
        if self.kind == "ramjet":
            conf = self.work / f"{name}.toml"
            conf.write_text(ramjet_node(self.work, name, addr, budget))
            cmd = [self.bin, "serve", "--config", str(conf)]
        else:
            d, text = nginx_node(self.work, name, addr, budget)
            (d / "nginx.conf").write_text(text)
            cmd = ["nginx", "-p", str(d), "-c", str(d / "nginx.conf")]
        self.fleet.start(name, cmd, self.work / f"{name}.err")

    def wait_server_up(self, name, within=30):
        """Until HAProxy's health checks say `name` is UP."""
        end = time.time() + within
        while time.time() < end:
            for row in haproxy_cmd(self.work, "show stat").splitlines():
                f = row.split(",")
                if len(f) > 17 and f[0] == "nodes" and f[1] == name and f[17] == "UP":
                    return
            time.sleep(0.1)
        raise SystemExit(f"HAProxy never saw {name} up")

    def client(self, mode, seconds=0, keys=None, threads=None):
        """Run the client in its namespace; its JSON."""
        cmd = [sys.executable, str(Path(__file__).resolve()), mode,
               "--manifest", str(self.work / "manifest.json"), "--seconds", str(seconds),
               "--threads", str(threads or self.args.threads), "--zipf", str(self.args.zipf),
               "--seed", str(self.args.seed)]
        if keys is not None:
            path = self.work / f"keys-{mode}-{time.time_ns()}.json"
            path.write_text(json.dumps(sorted(keys)))
            cmd += ["--keys", str(path)]
        return json.loads(self.fleet.run_in("client", cmd, timeout=seconds + 600))

    def go(self):
        a, work = self.args, self.work
        result = {"server": self.kind}
        try:
            self.fleet.build()
            self.start_origin()
            for n in NODES:
                self.start_node(n)
            for n in NODES:
                self.fleet.wait_up(n, NODES[n])
            (work / "haproxy.cfg").write_text(haproxy_config(work))
            self.fleet.start("lb", ["haproxy", "-db", "-f", str(work / "haproxy.cfg")],
                             work / "haproxy.err")
            self.fleet.wait_up("lb", LB, path="/o/00000.bin")

            # 1. steady
            three = ["node1", "node2", "node3"]
            cpu0 = self.fleet.cpu(three)
            steady = self.client("drive", a.phase)
            steady_cpu = self.fleet.cpu(three) - cpu0
            fetched = origin_fetches(work / "origin-access.log")
            counts, pulled = counted(fetched)
            asked = set(steady["seen"])
            want = sum(self.sizes[k] for k in asked)
            result["steady"] = {
                "requests": steady["requests"], "errors": steady["errors"],
                "error_samples": steady["error_samples"], "objects": len(asked),
                "object_bytes": want, "origin_bytes": pulled,
                "origin_ratio": pulled / want if want else 0.0,
                "per_node": tally(steady["seen"]),
                "node_cpu_seconds": steady_cpu,
            }
            before = self.client("map", keys=asked)

            # 2. kill one node mid-phase and restart it
            victim = "node2"
            box = {}
            t = threading.Thread(target=lambda: box.update(r=self.client("drive", a.phase)))
            t.start()
            time.sleep(a.phase * 0.3)
            self.fleet.kill(victim, signal.SIGKILL)
            killed_at = time.time()
            # The victim's last fetches are in the origin's log once it has been written
            # out (once a second); nothing after is the victim's until its restart.
            time.sleep(1.2)
            at_kill = len(origin_fetches(work / "origin-access.log", settle=False))
            time.sleep(max(0.0, killed_at + a.down - time.time()))
            at_restart = len(origin_fetches(work / "origin-access.log", settle=False))
            self.start_node(victim)
            t.join()
            self.wait_server_up(victim)
            kill = box["r"]
            asked |= set(kill["seen"])
            mapped = self.client("map", keys=asked)
            fetched = origin_fetches(work / "origin-access.log")
            counts, pulled = counted(fetched)
            again = {k for k, c in counts.items() if c > 1}
            had = {k for k, r, _ in fetched[:at_kill] if r == NODES[victim]}
            # What the victim fetched again after its restart that it held before the kill
            # (its disk tier lost it), and who fetched while it was down.
            lost = {k for k, r, _ in fetched[at_restart:] if r == NODES[victim] and k in had}
            while_down = {}
            for _, r, _ in fetched[at_kill:at_restart]:
                while_down[r] = while_down.get(r, 0) + 1
            result["kill"] = {
                "requests": kill["requests"], "errors": kill["errors"],
                "error_samples": kill["error_samples"], "victim": victim,
                "down_seconds": a.down, "killed_at": killed_at,
                "refetched": len(again),
                "refetched_of_victim": sum(1 for k in again if mapped.get(k) == victim),
                "refetched_others": sorted(k for k in again if mapped.get(k) != victim)[:20],
                # Within a second (the origin writes its log once a second).
                "fetches_while_down": dict(sorted(while_down.items())),
                "victim_held": len(had),
                "victim_fetched_again_after_restart": len(lost),
                "origin_bytes": pulled,
            }

            # 2b. a graceful stop (TERM; nginx's is QUIT): the health check should take the
            # node out (ramjet: 503 "draining") before its listeners close.
            leaving = "node3"
            box = {}
            t = threading.Thread(target=lambda: box.update(r=self.client("drive", a.phase)))
            t.start()
            time.sleep(a.phase * 0.3)
            p = self.fleet.procs.pop(leaving)
            os.killpg(p.pid, signal.SIGTERM if self.kind == "ramjet" else signal.SIGQUIT)
            status = p.wait(timeout=60)
            self.start_node(leaving)
            t.join()
            self.wait_server_up(leaving)
            drain = box["r"]
            said = [line.split("is DOWN", 1)[1].strip(" ,").removeprefix("reason: ") for line in
                    (work / "haproxy.err").read_text(errors="replace").splitlines()
                    if f"nodes/{leaving} is DOWN" in line]
            result["drain"] = {
                "requests": drain["requests"], "errors": drain["errors"],
                "error_samples": drain["error_samples"], "node": leaving,
                "exit_status": status, "haproxy_saw": said[:1],
            }

            # 3. a fourth node joins
            reply = haproxy_cmd(work, "set server nodes/node4 state ready")
            if reply.strip():
                raise SystemExit(f"haproxy: {reply}")
            self.wait_server_up("node4")
            joined = self.client("map", keys=asked)
            moved = [k for k in asked if joined.get(k) != mapped.get(k)]
            to_new = [k for k in moved if joined.get(k) == "node4"]
            four = three + ["node4"]
            cpu0 = self.fleet.cpu(four)
            join = self.client("drive", a.phase)
            join_cpu = self.fleet.cpu(four) - cpu0
            asked |= set(join["seen"])
            result["join"] = {
                "objects": len(mapped), "moved": len(moved), "moved_to_new": len(to_new),
                "moved_share": len(moved) / max(1, len(mapped)),
                "requests": join["requests"], "errors": join["errors"],
                "error_samples": join["error_samples"], "per_node": tally(joined),
                "node_cpu_seconds": join_cpu,
            }

            # 4. the origin stops; clients ask for what is cached
            cached = set(self.client("map", keys=asked))
            self.fleet.kill("origin", signal.SIGTERM)
            down = self.client("drive", a.origin_down, keys=cached)
            self.start_origin()
            result["origin_down"] = {
                "seconds": a.origin_down, "max_age": a.max_age,
                "requests": down["requests"], "errors": down["errors"],
                "error_samples": down["error_samples"], "statuses": down["statuses"],
                "stale": down["stale"],
            }
            result["before_kill_per_node"] = tally(before)
        finally:
            self.fleet.teardown()
        return result


def tally(seen):
    out = {}
    for node in seen.values():
        out[node] = out.get(node, 0) + 1
    return dict(sorted(out.items()))


def report(results, args, versions):
    lines = [
        "# A caching fleet behind HAProxy: ramjet nodes against nginx proxy_cache nodes",
        "",
        f"Command: `bench/fleet.py {' '.join(sys.argv[1:])}`",
        "",
        f"Topology: HAProxy (`balance uri`, `hash-type consistent`, PROXY v2, `option httpchk "
        f"GET /health` every 300 ms, `retries 3`, `option redispatch 1`, `retry-on "
        f"conn-failure empty-response junk-response response-timeout`) in front of 3 nodes "
        f"(a 4th joins in phase 3), each node one worker with a {args.node_cache >> 20} MiB "
        f"disk cache ({args.node_cache >> 22} MiB of memory) and at most 16 connections to "
        f"the origin; the origin a ramjet serving {args.objects} files of 1 to 64 KiB "
        f"(Cache-Control: max-age={args.max_age}, stale-if-error=600). Each host in its own "
        f"network namespace on one bridge. Client: {args.threads} keep-alive connections, "
        f"Zipf s={args.zipf}, {args.phase} s per phase.",
        "",
        "Versions: " + "; ".join(versions),
        "",
        "One column per run (server, round); the rounds alternate the servers.",
        "",
        "| | " + " | ".join(f"{r['server']} {r['round']}" for r in results) + " |",
        "|---|" + "---|" * len(results),
    ]

    def row(label, f):
        lines.append(f"| {label} | " + " | ".join(f(r) for r in results) + " |")

    row("steady: requests / errors", lambda r: f"{r['steady']['requests']} / {r['steady']['errors']}")
    row("steady: requests per node CPU-second",
        lambda r: f"{r['steady']['requests'] / max(r['steady']['node_cpu_seconds'], 1e-3):,.0f}")
    row("steady: distinct objects (bytes)",
        lambda r: f"{r['steady']['objects']} ({r['steady']['object_bytes']:,})")
    row("steady: origin body bytes (ratio)",
        lambda r: f"{r['steady']['origin_bytes']:,} ({r['steady']['origin_ratio']:.4f}x)")
    row("kill -9 node2, back after "
        f"{args.down} s: requests / errors",
        lambda r: f"{r['kill']['requests']} / {r['kill']['errors']}")
    row("kill: objects the origin sent twice (of node2's)",
        lambda r: f"{r['kill']['refetched']} ({r['kill']['refetched_of_victim']})")
    row("kill: objects node2 held / fetched again after its restart",
        lambda r: f"{r['kill']['victim_held']} / {r['kill']['victim_fetched_again_after_restart']}")
    row("graceful stop of node3 (TERM; nginx QUIT): requests / errors",
        lambda r: f"{r['drain']['requests']} / {r['drain']['errors']}")
    row("graceful stop: why HAProxy took node3 out",
        lambda r: "; ".join(r["drain"]["haproxy_saw"]).split(", info")[0]
        or "not taken out (back before two failed checks)")
    row("join node4: objects that moved (to node4)",
        lambda r: f"{r['join']['moved']} of {r['join']['objects']} "
                  f"({100 * r['join']['moved_share']:.1f}%; {r['join']['moved_to_new']})")
    row("join: requests / errors", lambda r: f"{r['join']['requests']} / {r['join']['errors']}")
    row("join: requests per node CPU-second",
        lambda r: f"{r['join']['requests'] / max(r['join']['node_cpu_seconds'], 1e-3):,.0f}")
    row(f"origin down {args.origin_down} s: requests / errors",
        lambda r: f"{r['origin_down']['requests']} / {r['origin_down']['errors']}")
    row("origin down: answers served stale (stale-if-error)",
        lambda r: f"{r['origin_down']['stale']}")
    lines.append("")
    for kind in dict.fromkeys(r["server"] for r in results):
        mine = [r for r in results if r["server"] == kind]
        errors = sum(r[p]["errors"] for r in mine
                     for p in ("steady", "kill", "drain", "join", "origin_down"))
        per_cpu = sorted(r["steady"]["requests"] / max(r["steady"]["node_cpu_seconds"], 1e-3)
                         for r in mine)
        warm = sorted(r["join"]["requests"] / max(r["join"]["node_cpu_seconds"], 1e-3)
                      for r in mine)
        lines.append(f"- {kind}: {len(mine)} runs, {errors} client errors in all; requests per "
                     f"node CPU-second, median: {per_cpu[len(per_cpu) // 2]:,.0f} steady (cold "
                     f"start), {warm[len(warm) // 2]:,.0f} after the join")
    lines += [
        "",
        "Reading it:",
        "",
        "- Origin bytes: what the origin sent (body bytes of its 200 answers, from its access "
        "log) against the sizes of the distinct objects the clients asked for.",
        "- kill: the objects sent twice are the killed node's, fetched by the nodes that took "
        "its keys while it was down; the ones it held before were still on its disk after the "
        "restart, and it fetched none of them again.",
        "- graceful stop: ramjet's `health` handler answers 503 during `timeouts.drain` (2 s) "
        "and HAProxy takes the node out on that answer; nginx (QUIT) closes its listeners at "
        "once and is back before two failed checks, its requests retried by HAProxy.",
        "- join: with consistent hashing the ideal share moved to a 4th node is 25%; every "
        "object that moved went to the new node.",
        "- Requests per node CPU-second: the nodes' CPU time (from /proc) includes the "
        "kernel's work on the veth and bridge done in their context, and the client (Python, "
        "on the same two CPUs) sets the pace, so these rows vary by a quarter from run to "
        "run; `bench/cache.py` and `bench/cold_fill.py` measure the cache itself.",
    ]
    for r in results:
        for phase in ("steady", "kill", "drain", "join", "origin_down"):
            if r[phase]["error_samples"]:
                lines.append("")
                lines.append(f"{r['server']} round {r['round']} {phase} errors (first ones):")
                lines += [f"- `{e}`" for e in r[phase]["error_samples"][:10]]
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="run", choices=["run", "drive", "map"])
    ap.add_argument("--servers", default="ramjet,nginx")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    ap.add_argument("--check", action="store_true",
                    help="short phases, ramjet only, the results as JSON on stdout")
    ap.add_argument("--objects", type=int, default=2000)
    ap.add_argument("--node-cache", type=int, default=16 << 20)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--zipf", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--phase", type=float, default=20)
    ap.add_argument("--down", type=float, default=3)
    ap.add_argument("--origin-down", type=float, default=30)
    ap.add_argument("--max-age", type=int, default=15)
    ap.add_argument("--bin", default=str(ROOT / "target/release/ramjet"),
                    help="the ramjet binary (the integration test passes its own)")
    ap.add_argument("--manifest")
    ap.add_argument("--keys")
    ap.add_argument("--seconds", type=float, default=0)
    args = ap.parse_args()
    if args.mode == "drive":
        return drive(args)
    if args.mode == "map":
        return map_keys(args)
    if os.geteuid() != 0:
        raise SystemExit("fleet.py needs root (ip netns)")
    if args.check:
        args.servers = "ramjet"
        args.phase = min(args.phase, 8)
        args.origin_down = min(args.origin_down, 6)
        args.max_age = min(args.max_age, 3)
        args.objects = min(args.objects, 600)
        args.node_cache = min(args.node_cache, 8 << 20)
        args.threads = min(args.threads, 8)
    if not Path(args.bin).exists():
        raise SystemExit(f"{args.bin}: build first (cargo build --release)")
    results = []
    for round_ in range(1 if args.check else args.rounds):
        for kind in args.servers.split(","):
            work = Path(tempfile.mkdtemp(prefix=f"ramjet-fleet-{kind}-"))
            try:
                sizes = make_objects(work / "objects", args.objects)
                (work / "manifest.json").write_text(json.dumps(sizes))
                r = Run(kind, args, work, sizes).go()
                r["round"] = round_ + 1
                results.append(r)
                print(f"round {round_ + 1} {kind}: done", file=sys.stderr)
            finally:
                if not os.environ.get("KEEP_FLEET"):
                    shutil.rmtree(work, ignore_errors=True)
    if args.check:
        json.dump(results[0], sys.stdout, indent=1)
        return
    versions = procstat.tool_versions([
        [args.bin, "--version"], ["haproxy", "-v"], ["nginx", "-v"]])
    lines = report(results, args, versions)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "fleet.json").write_text(json.dumps(results, indent=1))
        procstat.write_report(args.out, lines)
    else:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
