"""Running the application under uvicorn: one process owning the devices, loopback unless
told otherwise; on SIGTERM or SIGINT readiness turns 503 at once, in-flight requests
finish within the drain timeout, then the process exits 0."""

from __future__ import annotations

import signal
import socket

import uvicorn

from .app import Server


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, whose exit signal also turns readiness off before it drains."""

    def __init__(self, config: uvicorn.Config, served: Server) -> None:
        super().__init__(config)
        self._served = served

    def handle_exit(self, sig, frame) -> None:
        self._served.ready = False
        super().handle_exit(sig, frame)


def uvicorn_server(served: Server, host: str = "127.0.0.1", port: int = 8000) -> _Uvicorn:
    config = uvicorn.Config(
        served.app,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=max(1, int(served.settings.drain_timeout_s)),
    )
    return _Uvicorn(config, served)


def serve_forever(served: Server, listener: socket.socket) -> None:
    """Serves on `listener` (bound already: a port in use fails before anything starts)
    until SIGTERM or SIGINT; then drains the models' queues and returns (so the process
    exits 0). Call it from the main thread."""
    host, port = listener.getsockname()[:2]
    server = uvicorn_server(served, host, port)
    # Once drained, uvicorn raises the signal it handled again for the handler it found:
    # this one ends the process quietly, through a normal return.
    previous = signal.signal(signal.SIGTERM, lambda number, frame: None)
    try:
        server.run(sockets=[listener])
    finally:
        signal.signal(signal.SIGTERM, previous)
        served.close()
