"""Copies that touch a device, run on the device's own queues through its backend.

A device's memory is its backend's (torch's tensors: CUDA memory from the caching
allocator, a virtual device's host memory): the core plans and counts a device's buffers
but never touches their bytes, so it hands every Copy to or from a device tier to Python.
Each link (a device's h2d, its d2h, a peer link to another device) has a queue of the
sending device's backend (a CUDA stream). A copy is
enqueued there and an event recorded after it; the copy completes, for the executor,
when that event does. One waiter thread per link sees its events complete in order (a
queue runs its work in order), so no thread waits per copy, and the executor's own
threads go on with other work meanwhile.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .. import core
from ..backends.interface import DeviceBackend, Event, Queue

LINK = core.QueueKind.Link


class _Pending:
    """A waiter's queue of (event, callback); None asks its thread to end."""

    def __init__(self) -> None:
        self.items: deque[tuple[Event, Callable[[BaseException | None], None]] | None] = deque()
        self.ready = threading.Condition()

    def put(self, item) -> None:
        with self.ready:
            self.items.append(item)
            self.ready.notify()

    def take(self):
        with self.ready:
            while not self.items:
                self.ready.wait()
            return self.items.popleft()


class LinkWaiter:
    """A thread that runs each callback once its event completes, in the order given. The
    thread holds only the queue, so the waiter is collected with its program, and then
    the thread ends."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._pending = _Pending()
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()  # concurrent calls share a link
        weakref.finalize(self, self._pending.put, None)

    def after(self, event: Event, then: Callable[[BaseException | None], None]) -> None:
        """Calls then(None) once `event` completes, or then(error) if waiting for it fails."""
        with self._starting:
            if self._thread is None:
                self._thread = threading.Thread(target=_wait_in_order, args=(self._pending,), daemon=True)
                self._thread.name = f"tt-{self._name}"
                self._thread.start()
        self._pending.put((event, then))


def _wait_in_order(pending: _Pending) -> None:
    while (item := pending.take()) is not None:
        event, then = item
        del item
        try:
            event.wait()
        except BaseException as error:  # a device error: the copy's run fails with it
            then(error)
        else:
            then(None)
        del event, then  # nothing of a finished call stays referenced while this thread waits


@dataclass(frozen=True)
class DeviceLink:
    """One way between two memories (host RAM and a device, or two peer devices): the
    queue its copies run on (the sending device's) and the thread that sees them complete."""

    queue: Queue
    waiter: LinkWaiter
    target: tuple[DeviceBackend, int] | None  # the device copies go to (backend, index); None: host memory
    owner: tuple[DeviceBackend, int]  # the device whose queue it is (the sending one; a device's for h2d)

    def empty_like(self, value: torch.Tensor) -> torch.Tensor:
        """Where the copy of `value` goes: the target device's memory, or host memory coming back."""
        if self.target is None:
            return torch.empty(value.shape, dtype=value.dtype)
        backend, index = self.target
        return backend.empty_like(index, value)


def reverse_links(program: core.Program, links: dict[int, DeviceLink]) -> dict[int, DeviceLink]:
    """Per link queue, the link the other way: "<device>.d2h" for "<device>.h2d" and back,
    "b->a" for "a->b" (a peer link joins both ways)."""
    position = {program.queues[p].name: p for p in links}
    reverse = {}
    for p in links:
        name = program.queues[p].name
        if "->" in name:
            source, target = name.split("->")
            other = f"{target}->{source}"
        else:
            device, _, way = name.rpartition(".")
            other = f"{device}.{'d2h' if way == 'h2d' else 'h2d'}"
        reverse[p] = links[position[other]]
    return reverse


def device_links(program: core.Program, devices: dict[str, tuple[DeviceBackend, int]]) -> dict[int, DeviceLink]:
    """Per link queue of `program` ("<device>.h2d", "<device>.d2h", "<from>-><to>" between
    peers), its DeviceLink; `devices` gives each device's backend and index there."""
    links = {}
    for position, queue in enumerate(program.queues):
        if queue.kind != LINK:
            continue
        if "->" in queue.name:
            source, target = (devices[name] for name in queue.name.split("->"))
        else:
            device, _, way = queue.name.rpartition(".")
            source, target = devices[device], devices[device] if way == "h2d" else None
        backend, index = source
        links[position] = DeviceLink(backend.queue(index), LinkWaiter(queue.name), target, source)
    return links
