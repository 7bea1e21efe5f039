"""One model's queue and the thread that runs it: dynamic batching, backpressure, deadlines.

Requests wait in a bounded queue (a full queue refuses the next with 503, so memory never
grows without bound). The worker takes the oldest request and, for a model with a batch
dimension, gathers the next ones whose rows still fit the compiled batch size, waiting up
to `max_delay_s` for more; the batch runs as one call, padded to the batch size, and each
request gets its own rows back. A request whose deadline passes while it waits is
answered 504 and never runs; one whose client goes away is dropped. A running batch whose
requests have all expired or gone is cancelled through its call handle at the next
instruction boundary. A batch that fails fails only its own requests.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import torch

from ..errors import ExecutionCancelled
from .metrics import ServeMetrics
from .protocol import RequestError
from .served_model import ServedModel

POLL_S = 0.005  # how often a running batch checks whether its requests still want it


@dataclass(eq=False)
class Pending:
    """One request in a model's queue or batch; `future` gets its outputs or a RequestError."""

    inputs: dict[str, torch.Tensor]
    rows: int
    deadline: float  # time.monotonic()
    enqueued: float = field(default_factory=time.monotonic)
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    gone: bool = False  # its client stopped waiting (disconnected, or its deadline passed)

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.deadline


class Batcher:
    def __init__(self, model: ServedModel, max_queue: int, max_delay_s: float, metrics: ServeMetrics) -> None:
        self.model, self._max_queue, self._max_delay_s, self._metrics = model, max_queue, max_delay_s, metrics
        self._queue: deque[Pending] = deque()
        self._changed = threading.Condition()
        self._stopping = False
        self._running = 0  # requests in the batch being executed
        self._thread = threading.Thread(target=self._loop, name=f"tt-serve-{model.name}", daemon=True)
        self._thread.start()

    def submit(self, pending: Pending) -> None:
        """Queues `pending`, or raises RequestError(503) when the queue is full or closing."""
        with self._changed:
            if self._stopping:
                self._reject("shutting_down")
                raise RequestError(503, "the server is shutting down")
            if len(self._queue) >= self._max_queue:
                self._reject("queue_full")
                raise RequestError(503, f"model {self.model.name!r}: its queue is full ({self._max_queue} waiting)")
            self._queue.append(pending)
            self._metrics.queue_depth.labels(self.model.name).set(len(self._queue))
            self._changed.notify_all()

    def abandon(self, pending: Pending, reason: str, error: RequestError) -> None:
        """The client stopped waiting for `pending` (`reason`: "timeout" or "disconnected"):
        it leaves the queue unrun, or its batch is cancelled once no request wants it."""
        with self._changed:
            pending.gone = True
            if pending in self._queue:
                self._queue.remove(pending)
                self._metrics.queue_depth.labels(self.model.name).set(len(self._queue))
            self._reject(reason)
            _settle(pending, error=error)
            self._changed.notify_all()

    def close(self, timeout_s: float) -> None:
        """Refuses new requests, lets the queued and running ones finish (up to `timeout_s`)."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        self._thread.join(timeout_s)

    @property
    def busy(self) -> int:
        """Requests queued or running."""
        with self._changed:
            return len(self._queue) + self._running

    def _reject(self, reason: str) -> None:
        self._metrics.rejections.labels(self.model.name, reason).inc()

    def _loop(self) -> None:
        while (batch := self._take()) is not None:
            self._run(batch)

    def _take(self) -> list[Pending] | None:
        """The next batch, or None once stopping with nothing queued."""
        capacity = self.model.batch_size or 1
        with self._changed:
            while not self._queue and not self._stopping:
                self._changed.wait()
            batch: list[Pending] = []
            rows, until = 0, None  # until: how long the batch may wait for more, from its first request
            while True:
                while self._queue and rows + self._queue[0].rows <= capacity:
                    pending = self._queue.popleft()
                    if pending.expired:  # never runs
                        self._reject("timeout")
                        _settle(pending, error=RequestError(504, "the request's deadline passed while it waited"))
                        continue
                    batch.append(pending)
                    rows += pending.rows
                self._metrics.queue_depth.labels(self.model.name).set(len(self._queue))
                if not batch:
                    if self._stopping:
                        return None
                    self._changed.wait()
                    continue
                until = until if until is not None else time.monotonic() + self._max_delay_s
                # Full, or the next request does not fit, or waited long enough: run it.
                if rows >= capacity or self._queue or self._stopping or time.monotonic() >= until:
                    break
                self._changed.wait(until - time.monotonic())
            self._running = len(batch)
            return batch

    def _run(self, batch: list[Pending]) -> None:
        name, metrics = self.model.name, self._metrics
        started = time.monotonic()
        for pending in batch:
            metrics.queue_seconds.labels(name).observe(started - pending.enqueued)
        try:
            handle = self.model.start([p.inputs for p in batch])
            while True:
                try:
                    outputs = handle.result(timeout=POLL_S)
                    break
                except concurrent.futures.TimeoutError:
                    if all(p.gone or p.expired for p in batch):
                        handle.cancel()
            answers = self.model.split(outputs, [p.rows for p in batch])
        except ExecutionCancelled:
            metrics.cancellations.labels(name).inc()
            answers = [RequestError(504, "cancelled: no request of its batch was still waiting")] * len(batch)
        except Exception as error:  # the model's own failure: this batch's requests alone get it
            answers = [RequestError(500, f"model {name!r} failed: {type(error).__name__}: {error}")] * len(batch)
        else:
            metrics.executions.labels(name).inc()
            metrics.inferences.labels(name).inc(len(batch))
            metrics.batch_size.labels(name).observe(len(batch))
            for tier, nbytes in self.model.compiled.last_peak_bytes.items():
                metrics.tier_bytes.labels(name, tier).set(nbytes)
        metrics.compute_seconds.labels(name).observe(time.monotonic() - started)
        with self._changed:
            for pending, answer in zip(batch, answers):
                if isinstance(answer, RequestError):
                    _settle(pending, error=answer)
                else:
                    _settle(pending, result=answer)
            self._running = 0


def _settle(pending: Pending, result: object = None, error: RequestError | None = None) -> None:
    """Gives `pending` its answer, unless it has one already (the first answer stands)."""
    if pending.future.done():
        return
    if error is not None:
        pending.future.set_exception(error)
    else:
        pending.future.set_result(result)
