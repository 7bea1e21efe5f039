"""CallHandle: one call started by CompiledModule.submit, with its own cancellation and report."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FuturesTimeout
from typing import Any

from .. import core


class CallHandle:
    """A call in flight. Thread-safe: any thread may wait on it or cancel it."""

    def __init__(self, future: Future, token: core.CancelToken, report_of: Callable) -> None:
        """`future` gives (outputs, raw report); `report_of` turns a raw report into a RunReport."""
        self._future = future
        self._token = token
        self._report_of = report_of

    def result(self, timeout: float | None = None) -> Any:
        """The call's outputs, waiting up to `timeout` seconds (None: as long as it takes).
        Raises what the call raised (ExecutionCancelled after cancel()), or TimeoutError."""
        try:
            return self._future.result(timeout)[0]
        except FuturesTimeout as error:  # concurrent.futures says nothing of what timed out
            raise TimeoutError(f"the call did not finish within {timeout} s; it goes on (cancel() stops it)") from error

    def cancel(self) -> None:
        """Stops this call before its next region (or before it starts); other calls go on."""
        self._token.request()

    def done(self) -> bool:
        """True once the call has finished, failed or been cancelled."""
        return self._future.done()

    @property
    def report(self) -> core.RunReport | None:
        """This call's telemetry once it finished successfully; None before, or if it failed."""
        if not self._future.done() or self._future.exception() is not None:
            return None
        return self._report_of(self._future.result()[1])
