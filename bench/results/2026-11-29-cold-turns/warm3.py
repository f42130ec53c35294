# warm3.py PATH same|separate: a warmer thread reads 8 MiB windows one ahead (sendfile to /dev/null)
# while a sender reads the same bytes behind it in 64 KiB calls (to /dev/null), on the same fd or not.
import os, sys, time, threading
path, mode = sys.argv[1], sys.argv[2]
W, C = 8 << 20, 64 << 10
null = os.open("/dev/null", os.O_WRONLY)
fd = os.open(path, os.O_RDONLY)
wfd = fd if mode == "same" else os.open(path, os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
size = os.fstat(fd).st_size
done = [0]; cv = threading.Condition()
def warmer():
    off = 0
    while off < size:
        n = min(W, size - off); o = off
        while n > 0:
            k = os.sendfile(null, wfd, o, n); o += k; n -= k
        off += W
        with cv: done[0] = off; cv.notify_all()
t = time.time(); c0 = time.process_time()
th = threading.Thread(target=warmer); th.start()
off = 0
while off < size:
    with cv:
        while done[0] < min(off + C, size): cv.wait()
    os.sendfile(null, fd, off, min(C, size - off)); off += C
th.join()
dt = time.time() - t
print(f"{mode}: {size*8/dt/1e9:.2f} Gbit/s, cpu {time.process_time()-c0:.2f} s", flush=True)
