# warm2.py PATH: read PATH into the page cache (sendfile of 8 MiB windows to /dev/null) after
# dropping it, on a fresh descriptor, again on the same one, then on another fresh one.
import os, sys, time
path = sys.argv[1]; W = 8 << 20
null = os.open("/dev/null", os.O_WRONLY)
def run(fd, label):
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    size = os.fstat(fd).st_size
    t = time.time(); c0 = time.process_time()
    off = 0
    while off < size:
        n = min(W, size - off); o = off
        while n > 0:
            k = os.sendfile(null, fd, o, n)
            if k <= 0: break
            o += k; n -= k
        off += W
    dt = time.time() - t
    print(f"{label}: {size*8/dt/1e9:.2f} Gbit/s, cpu {time.process_time()-c0:.2f} s", flush=True)
fd = os.open(path, os.O_RDONLY)
run(fd, "fresh fd")
run(fd, "same fd again")
fd2 = os.open(path, os.O_RDONLY)
run(fd2, "another fresh fd")
