# warm.py seq|parN [WINDOW_MIB]: drop the cold 2 GiB file from the page cache, then read it into
# the cache as the pool does (sendfile of WINDOW_MIB windows to /dev/null), in turn (seq) or by N
# threads (parN); prints Gbit/s. The disk's pace with no socket involved.
import os, sys, time, threading
path = "/tmp/ramjet-bench/www/cold/big2g.bin"
W = int(sys.argv[2]) << 20 if len(sys.argv) > 2 else 8 << 20
mode = sys.argv[1]
fd = os.open(path, os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
null = os.open("/dev/null", os.O_WRONLY)
size = os.fstat(fd).st_size
t = time.time()
def warm(off, n):
    while n > 0:
        k = os.sendfile(null, fd, off, n)
        if k <= 0: break
        off += k; n -= k
if mode == "seq":
    off = 0
    while off < size:
        warm(off, min(W, size - off)); off += W
elif mode.startswith("par"):
    k = int(mode[3:])
    offs = list(range(0, size, W)); lock = threading.Lock()
    def worker():
        while True:
            with lock:
                if not offs: return
                o = offs.pop(0)
            warm(o, min(W, size - o))
    ts = [threading.Thread(target=worker) for _ in range(k)]
    [x.start() for x in ts]; [x.join() for x in ts]
dt = time.time() - t
print(f"{mode} window {W>>20} MiB: {size*8/dt/1e9:.2f} Gbit/s")
