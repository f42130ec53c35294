#!/usr/bin/env python3
"""Instructions and syscalls per request of ramjet builds on the static path: each binary
serves under callgrind (one worker), and a keep-alive client asks for a file N1 and then N2
times; (Ir(N2) - Ir(N1)) / (N2 - N1) is what one more request costs, start-up and shutdown
cancelling out. Syscalls per request come the same way from `strace -c -f`. Instruction
counts do not depend on what else the machine is doing, so builds can be compared on a
loaded machine; they say nothing about cache misses or the kernel's share.

    bench/instructions.py --binaries old=/tmp/old/ramjet,new=target/release/ramjet \\
        --sizes 4096,22016,102400 --out bench/results/$(date +%F)-instructions
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import procstat  # noqa: E402

PORT = 18290


def serve(wrapper, binary, www, out_file):
    cmd = wrapper(out_file) + [binary, "serve", str(www), "--listen", f"127.0.0.1:{PORT}",
                               "--workers", "1", "--access-log", "off"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    procstat.wait_port(PORT, p, within=120)
    return p


# Extra `ramjet bench` arguments for every load (`--no-keepalive`: a connection per request).
LOAD_ARGS = []


def load(client, name, n):
    subprocess.run([client, "bench", "-c", "1", "-n", str(n), *LOAD_ARGS, f"http://127.0.0.1:{PORT}/{name}"],
                   check=True, capture_output=True, timeout=600)


def stop(p):
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def callgrind_ir(binary, client, www, name, n, tmp):
    out = tmp / f"cg.{os.getpid()}.{n}.out"
    p = serve(lambda o: ["valgrind", "--tool=callgrind", f"--callgrind-out-file={o}"],
              binary, www, out)
    # One request first: the file is opened and cached in every run alike.
    load(client, name, 1)
    load(client, name, n)
    stop(p)
    return callgrind_total(tmp.glob(f"cg.{os.getpid()}.{n}.out*"))


def callgrind_total(files):
    """The instructions (Ir) callgrind counted in `files` (one per thread or process),
    added up; the files are removed."""
    total = 0
    for f in files:
        m = re.search(r"^summary:\s+(\d+)", f.read_text(errors="replace"), re.M)
        if m:
            total += int(m.group(1))
        f.unlink()
    return total


def strace_calls(binary, client, www, name, n, tmp):
    out = tmp / f"st.{os.getpid()}.{n}.txt"
    p = serve(lambda o: ["strace", "-f", "-c", "-o", str(o)], binary, www, out)
    load(client, name, 1)
    load(client, name, n)
    stop(p)
    calls = {}
    for line in out.read_text().splitlines():
        f = line.split()
        if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
            calls[f[-1]] = int(f[3])
    out.unlink()
    return calls


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binaries", required=True, help="NAME=PATH,...")
    ap.add_argument("--client", help="ramjet binary for the load (default: the last)")
    ap.add_argument("--sizes", default="4096,22016,102400")
    ap.add_argument("--n1", type=int, default=500)
    ap.add_argument("--n2", type=int, default=2500)
    ap.add_argument("--no-keepalive", action="store_true",
                    help="a new connection per request (the accept path counts too)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.no_keepalive:
        LOAD_ARGS.append("--no-keepalive")
    bins = [b.split("=", 1) for b in args.binaries.split(",")]
    client = args.client or bins[-1][1]
    tmp = Path(tempfile.mkdtemp(prefix="ramjet-ir-"))
    www = tmp / "www"
    www.mkdir()
    sizes = [int(s) for s in args.sizes.split(",")]
    for s in sizes:
        (www / f"f{s}.bin").write_bytes(os.urandom(s))
    dn = args.n2 - args.n1
    kind = "request on its own connection" if args.no_keepalive else "keep-alive request"
    lines = [f"# Instructions and syscalls per {kind}, one worker", "",
             f"Command: `bench/instructions.py {' '.join(sys.argv[1:])}`", "",
             f"Per request: (count at {args.n2} requests - count at {args.n1}) / {dn}; "
             "callgrind Ir of the whole server process, syscalls from `strace -c -f`.", "",
             "| size | build | Ir/request | syscalls/request | by call |", "|---:|---|---:|---:|---|"]
    for s in sizes:
        name = f"f{s}.bin"
        for label, b in bins:
            ir = (callgrind_ir(b, client, www, name, args.n2, tmp)
                  - callgrind_ir(b, client, www, name, args.n1, tmp)) / dn
            c2 = strace_calls(b, client, www, name, args.n2, tmp)
            c1 = strace_calls(b, client, www, name, args.n1, tmp)
            per = {k: (c2.get(k, 0) - c1.get(k, 0)) / dn for k in set(c1) | set(c2)}
            per = {k: v for k, v in per.items() if v >= 0.01}
            total = sum(per.values())
            detail = ", ".join(f"{k} {v:.2f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1]))
            lines.append(f"| {s} | {label} | {ir:,.0f} | {total:.2f} | {detail} |")
            print(lines[-1], flush=True)
    procstat.write_report(args.out, lines)


if __name__ == "__main__":
    main()
