"""Which threads are running a compiled module's call right now: the caller's thread for
the whole call, an executor thread while it computes a region. close() asked from such a
thread (a hook inside the model) cannot wait for the calls to end, since it is one of
them; it leaves the release to the last call that ends."""

from __future__ import annotations

import threading

_state = threading.local()


class _RunningACall:
    """Marks the current thread as part of a call for a `with` block (nests). A plain
    class, not a generator: calls on the direct path count microseconds."""

    def __enter__(self) -> None:
        _state.depth = getattr(_state, "depth", 0) + 1

    def __exit__(self, *exc: object) -> None:
        _state.depth -= 1


running_a_call = _RunningACall()


def on_a_call_thread() -> bool:
    """True while the current thread runs part of some compiled module's call."""
    return getattr(_state, "depth", 0) > 0
