# SRV=name python3 startsrv.py: start one server as bench/compare.py configures it, on CPU 0
# (config under /tmp/srv/NAME); prints its pid and waits for it.
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.argv = ["x"]
import compare  # noqa: E402  bench/compare.py

name = os.environ["SRV"]
d = pathlib.Path("/tmp/srv") / name
d.mkdir(parents=True, exist_ok=True)
ramjet = os.environ.get("BIN") or str(pathlib.Path(__file__).resolve().parents[3] / "target/release/ramjet")
cmd = ["taskset", "-c", "0"] + compare.server_cmd(name, d, ramjet)
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(p.pid, flush=True)
p.wait()
