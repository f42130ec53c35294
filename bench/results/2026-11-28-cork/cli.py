import socket, struct, sys, time
port = int(sys.argv[1]); path = sys.argv[2]; n = int(sys.argv[3]) if len(sys.argv) > 3 else 1
s = socket.create_connection(('127.0.0.1', port))
buf = bytearray(1 << 20); mv = memoryview(buf)
def info():
    b = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    # tcpi_data_segs_in is at byte offset 164 in struct tcp_info (gnu layout)
    return struct.unpack_from('I', b, 152)[0]
tot = 0
for _ in range(n):
    s.sendall(b'GET %s HTTP/1.1\r\nHost: x\r\n\r\n' % path.encode())
    got = b''
    while b'\r\n\r\n' not in got: got += s.recv(4096)
    head, rest = got.split(b'\r\n\r\n', 1)
    clen = int([l.split(b':')[1] for l in head.split(b'\r\n') if l.lower().startswith(b'content-length')][0])
    left = clen - len(rest)
    while left > 0:
        k = s.recv_into(mv, min(left, len(buf)), socket.MSG_TRUNC)
        if k == 0: raise SystemExit('eof')
        left -= k
    tot += clen
segs = info()
print(f"bytes {tot} data segs in {segs} bytes/seg {tot/segs:.0f}")
