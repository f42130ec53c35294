#!/usr/bin/env python3
"""A flood of TLS handshakes that costs the client almost nothing: new connections, each
sending one recorded TLS 1.3 ClientHello (X25519 key share) and closing once the server's
first flight has come back. The server does a full key exchange and signature for each.

    python3 bench/hello_flood.py PORT SECONDS [IN_FLIGHT]   # prints handshakes answered
"""
import selectors
import socket
import sys
import time
from pathlib import Path

HELLO = (Path(__file__).resolve().parent.parent / "fuzz/seeds/tls_first_bytes/client_hello").read_bytes()


def main():
    port, seconds = int(sys.argv[1]), float(sys.argv[2])
    in_flight = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    sel = selectors.DefaultSelector()
    end = time.time() + seconds
    answered = 0
    open_now = 0

    def start():
        nonlocal open_now
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        sel.register(s, selectors.EVENT_WRITE, "connecting")
        open_now += 1

    while time.time() < end:
        while open_now < in_flight:
            start()
        for key, ev in sel.select(timeout=0.1):
            s = key.fileobj
            if key.data == "connecting":
                try:
                    s.send(HELLO)
                    sel.modify(s, selectors.EVENT_READ, "sent")
                    continue
                except OSError:
                    pass
            else:
                try:
                    got = s.recv(65536)
                except OSError:
                    got = b""
                if got:
                    answered += 1
            sel.unregister(s)
            s.close()
            open_now -= 1
    print(answered)


if __name__ == "__main__":
    main()
