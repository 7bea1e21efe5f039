"""Backends whose devices compute in host memory: the CPU, and declared virtual devices.

Their copies are memcpy, done by the time `Queue.copy` returns, so every event is
complete when recorded. Memory is counted per device: the bytes of the tensors
`allocate` gave out that are still alive (or viewed). A tensor in host memory is in
their devices' memory already, so `hold` keeps it as it is.
"""

from __future__ import annotations

import threading
import weakref

import torch

from ..errors import MemoryCapacityError
from ..units import format_bytes
from .interface import DeviceBackend, Event, MemoryUse, Queue, page_bounds


class DoneEvent(Event):
    """An event of a synchronous queue: its work ran before it was recorded."""

    def done(self) -> bool:
        return True

    def wait(self) -> None:
        return None


class SyncQueue(Queue):
    """Copies in host memory, each complete when `copy` returns."""

    def copy(self, target: torch.Tensor, source: torch.Tensor) -> None:
        target.copy_(source)

    def record(self) -> Event:
        return DoneEvent()

    def wait_for(self, event: Event) -> None:
        if not event.done():
            raise ValueError(f"a synchronous queue cannot wait for an incomplete {type(event).__name__}")


class HostMemoryBackend(DeviceBackend):
    """The memory accounting, pinned memory and queues of devices in host memory; the
    subclass says which devices there are and their capacities (None: unbounded)."""

    def __init__(self, capacities: list[int | None]) -> None:
        self._capacities = capacities
        self._allocated = [0] * len(capacities)
        self._peak = [0] * len(capacities)
        self.registered: dict[int, int] = {}  # host ranges register_host was given: address -> bytes
        self._lock = threading.Lock()

    def torch_device(self, index: int) -> torch.device:
        self._check(index)
        return torch.device("cpu")

    def memory(self, index: int) -> MemoryUse:
        self._check(index)
        with self._lock:
            allocated, peak, capacity = self._allocated[index], self._peak[index], self._capacities[index]
        return MemoryUse(capacity, None if capacity is None else capacity - allocated, allocated, peak)

    def reset_peak(self, index: int) -> None:
        self._check(index)
        with self._lock:
            self._peak[index] = self._allocated[index]

    def allocate(self, index: int, nbytes: int) -> torch.Tensor:
        self._check(index)
        with self._lock:
            capacity, allocated = self._capacities[index], self._allocated[index]
            if capacity is not None and allocated + nbytes > capacity:
                raise MemoryCapacityError(
                    f"{self.devices(live=False)[index].name}: cannot allocate {nbytes} bytes "
                    f"({format_bytes(nbytes)}): {allocated} of its {capacity} bytes are allocated"
                )
            self._allocated[index] += nbytes
            self._peak[index] = max(self._peak[index], self._allocated[index])
        tensor = torch.empty(nbytes, dtype=torch.uint8)
        # On the storage, which torch keeps one Python object for: the bytes count until the
        # last view of them (a typed reshape of this tensor, say) is gone.
        weakref.finalize(tensor.untyped_storage(), self._release, index, nbytes)
        return tensor

    def _release(self, index: int, nbytes: int) -> None:
        with self._lock:
            self._allocated[index] -= nbytes

    def pinned_host(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8)  # the device reads host memory as it is

    def register_host(self, address: int, nbytes: int) -> bool:
        """Nothing to lock; the ranges are kept (`registered`), so tests can see what a GPU's would be."""
        begin, end = page_bounds(address, nbytes)
        with self._lock:
            if any(begin < e and b < end for b, e in (page_bounds(*r) for r in self.registered.items())):
                return False  # as CUDA refuses a range sharing a page with one registered already
            self.registered[address] = nbytes
        return True

    def unregister_host(self, address: int) -> None:
        with self._lock:
            self.registered.pop(address, None)

    def queue(self, index: int) -> Queue:
        self._check(index)
        return SyncQueue()

    def _check(self, index: int) -> None:
        if not isinstance(index, int) or not 0 <= index < len(self._capacities):
            raise IndexError(f"{self.kind}: no device {index!r}; it has {len(self._capacities)}")
