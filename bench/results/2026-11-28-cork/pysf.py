# A tiny epoll sendfile server to see how socket options shape loopback segments.
# env: NODELAY=0/1 CORK=0/1 CHUNK=bytes PORT
import os, socket, select
NODELAY = int(os.environ.get('NODELAY', '1')); CORK = int(os.environ.get('CORK', '0'))
CHUNK = int(os.environ.get('CHUNK', str(1 << 20))); PORT = int(os.environ.get('PORT', '18195'))
path = '/tmp/ramjet-bench/www/100m.bin'; fd = os.open(path, os.O_RDONLY); size = os.fstat(fd).st_size
head = b'HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n' % size
small = b'HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n'
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); ls.bind(('127.0.0.1', PORT)); ls.listen(1024); ls.setblocking(False)
ep = select.epoll(); ep.register(ls, select.EPOLLIN)
conns = {}
def start(c, st):
    if CORK: c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
    c.send(head); st['off'] = 0
def pump(c, st):
    while st['off'] is not None and st['off'] < size:
        try: n = os.sendfile(c.fileno(), fd, st['off'], min(CHUNK, size - st['off']))
        except BlockingIOError: return
        st['off'] += n
    if st['off'] is not None and st['off'] >= size:
        st['off'] = None
        if CORK: c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
while True:
    for f, ev in ep.poll():
        if f == ls.fileno():
            while True:
                try: c, _ = ls.accept()
                except BlockingIOError: break
                c.setblocking(False); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, NODELAY)
                conns[c.fileno()] = (c, {'buf': b'', 'off': None})
                ep.register(c, select.EPOLLIN | select.EPOLLOUT | select.EPOLLET)
            continue
        c, st = conns[f]
        if ev & select.EPOLLIN:
            try: d = c.recv(65536)
            except BlockingIOError: d = None
            if d == b'': ep.unregister(f); c.close(); del conns[f]; continue
            if d: st['buf'] += d
        while st['off'] is None and b'\r\n\r\n' in st['buf']:
            req, st['buf'] = st['buf'].split(b'\r\n\r\n', 1)
            if b'100m' in req: start(c, st)
            else: c.send(small)
        pump(c, st)
