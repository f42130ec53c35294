# single.py SERVER[:BIN] ...: per round (ROUNDS, default 3), each server in turn: one download of FILE
# (default cold/big2g.bin; sparse5g.bin for the sparse file) after dropping it from the page
# cache, as `bench/compare.py --single` does (curl on CPU 1, the server as compare.py configures it).
import sys, os
sys.path.insert(0, "/work/main/bench"); argv = sys.argv[1:]; sys.argv = ["x"]
import compare
rounds = int(os.environ.get("ROUNDS", "3"))
name = os.environ.get("FILE", "cold/big2g.bin")
for r in range(rounds):
    for spec in argv:
        srv, _, binp = spec.partition(":")
        s = compare.Server(srv, binp or "/work/main/target/release/ramjet")
        try:
            x = compare.single_download(s, name)
            print(f"round {r} {spec:30} {x['gbit_s']:6.2f} Gbit/s cpu {x['cpu_s']:.2f} s", flush=True)
        finally:
            s.stop()
