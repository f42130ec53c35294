# ss_sample.py PORT SECONDS OUT: `ss -tin` of the server's connections every 50 ms, each sample
# headed "T <CLOCK_MONOTONIC ns>" (the clock shim.so stamps wrk's reads with).
import subprocess, sys, time
port, secs, out = sys.argv[1], float(sys.argv[2]), open(sys.argv[3], "w")
end = time.monotonic() + secs
while time.monotonic() < end:
    out.write(f"T {time.monotonic_ns()}\n")
    out.write(subprocess.run(["ss", "-tin", f"sport = :{port}"], capture_output=True, text=True).stdout)
    time.sleep(0.05)
