"""The loopback link's speed: what a pipeline's stages on one machine send each other over."""

from __future__ import annotations

import socket
import threading
import time

CHUNK = 1 << 20


def loopback_bytes_per_s(nbytes: int = 64 << 20, rounds: int = 3) -> float:
    """Bytes per second through a TCP connection to 127.0.0.1 (as gloo's), best of `rounds`."""
    best = 0.0
    for _ in range(rounds):
        best = max(best, _one_round(nbytes))
    return best


def _one_round(nbytes: int) -> float:
    with socket.create_server(("127.0.0.1", 0)) as server:
        sender = threading.Thread(target=_send, args=(server.getsockname(), nbytes), daemon=True)
        sender.start()
        connection, _ = server.accept()
        with connection:
            buffer = bytearray(CHUNK)
            received = 0
            start = time.perf_counter()
            while received < nbytes:
                count = connection.recv_into(buffer)
                if count == 0:
                    raise OSError(f"loopback measurement: the sender stopped after {received} of {nbytes} bytes")
                received += count
            seconds = time.perf_counter() - start
        sender.join()
    return nbytes / max(seconds, 1e-9)


def _send(address: tuple[str, int], nbytes: int) -> None:
    payload = bytes(CHUNK)
    with socket.create_connection(address) as connection:
        for _ in range(nbytes // CHUNK):
            connection.sendall(payload)
