"""Clients that attack a control endpoint without its token, for the tests of the endpoint and of the streams behind
it."""

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def stalled_connections(port: int, host: str = "127.0.0.1", count: int = 32) -> Iterator[None]:
    """While the block runs: ``count`` connections, half a request line each, opened 20 ms apart and reopened as the
    server cuts them (a client without the token that keeps the endpoint's connections busy)."""
    stop = threading.Event()

    def attack() -> None:
        held: list[socket.socket] = []
        while not stop.is_set():
            held = [sock for sock in held if sock.fileno() != -1]
            while len(held) < count and not stop.is_set():
                try:
                    sock = socket.create_connection((host, port), timeout=1)
                    sock.sendall(b"GET /v1/sta")
                    held.append(sock)
                except OSError:
                    pass
                time.sleep(0.02)
            for sock in list(held):  # those the server cut are reopened
                sock.setblocking(False)
                try:
                    if sock.recv(1) == b"":
                        sock.close()
                except BlockingIOError:
                    pass
                except OSError:
                    sock.close()
            time.sleep(0.05)
        for sock in held:
            sock.close()

    attacker = threading.Thread(target=attack, name="stalled-connections", daemon=True)
    attacker.start()
    try:
        time.sleep(count * 0.02 + 0.5)  # all of them open
        yield
    finally:
        stop.set()
        attacker.join()
