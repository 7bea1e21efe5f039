"""The device backend interface: what TensorTorrent needs of a kind of device.

A backend serves one kind of device (the CPU, CUDA and ROCm, XPU, a declared virtual
device, or a third party's): it discovers its devices, reports their memory, gives out
device memory and pinned host memory, and runs copies on queues of its own (streams),
ordered across queues by events. Region kernels compute on its `torch_device`. A copy
enqueued on a queue returns at once; an event recorded after it completes when the copy
has, so the executor can wait on events instead of blocking a thread per copy.

`tensortorrent.backends.conformance` checks that a backend keeps these promises; every
built-in backend runs it in `make test` (the CPU and virtual ones) or `tests/device/`.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

PAGE = os.sysconf("SC_PAGE_SIZE")  # what host memory is page-locked in (4 KiB; 64 KiB on some aarch64)


def page_bounds(address: int, nbytes: int) -> tuple[int, int]:
    """The whole pages holding `nbytes` at `address`: (first byte, end)."""
    return address - address % PAGE, -(-(address + nbytes) // PAGE) * PAGE


@dataclass(frozen=True)
class DeviceInfo:
    """One compute device as discovered; figures its backend cannot give are None, never guessed."""

    name: str  # "cpu", "cuda:0", "xpu:0", a virtual device's declared name
    kind: str
    model: str
    total_bytes: int | None
    free_bytes: int | None
    capability: str | None = None  # CUDA compute capability, e.g. "9.0"
    peers: tuple[str, ...] = ()  # devices it can access directly


@dataclass(frozen=True)
class MemoryUse:
    """A device's memory as its backend's allocator counts it, in bytes."""

    total: int | None  # the device's capacity (None: not known)
    free: int | None  # free on the device now, for every process (None: not known)
    allocated: int  # held by this process's allocations through the backend now
    peak: int  # the most `allocated` has been since reset_peak


class Event(ABC):
    """A point in a queue's work: complete once everything enqueued before it has run."""

    @abstractmethod
    def done(self) -> bool:
        """Whether the work before it has completed (never blocks)."""

    @abstractmethod
    def wait(self) -> None:
        """Blocks the calling thread until done()."""


class Queue(ABC):
    """A device queue (a CUDA stream): work enqueued on it runs in order, asynchronously."""

    @abstractmethod
    def copy(self, target: torch.Tensor, source: torch.Tensor) -> None:
        """Enqueues copying `source` into `target` (same shape and dtype; either may be on
        the device or in host memory); returns before the copy completes on a device
        whose copies are asynchronous. Both tensors must stay alive until it completes."""

    @abstractmethod
    def record(self) -> Event:
        """An event that completes when the work enqueued so far has."""

    @abstractmethod
    def wait_for(self, event: Event) -> None:
        """Makes the work enqueued from now on wait for `event` (never blocks the caller)."""

    def launching(self) -> AbstractContextManager:
        """A block in which the kernels torch launches on the queue's device run on this
        queue (the device's compute queue); the default: kernels run as they are called."""
        return nullcontext()


class CapturedGraph(ABC):
    """The kernels of one run of a function, recorded once and replayed (a CUDA graph):
    each replay reads the same input tensors and writes the same `outputs`."""

    outputs: object  # what the function returned when captured, its tensors rewritten by every replay

    @abstractmethod
    def replay(self) -> None:
        """Runs the recorded kernels again, asynchronously on the device."""


class DeviceBackend(ABC):
    """One kind of device. `kind` prefixes its device names ("cuda" -> "cuda:0")."""

    kind: str

    @abstractmethod
    def devices(self, live: bool = True) -> list[DeviceInfo]:
        """Its devices, in index order. Without `live`, only what each device is (no free
        memory, no peers): a query that must not create a device context."""

    @abstractmethod
    def torch_device(self, index: int) -> torch.device:
        """Where region kernels placed on device `index` compute, and its memory lives."""

    @abstractmethod
    def memory(self, index: int) -> MemoryUse:
        """Device `index`'s memory now."""

    @abstractmethod
    def reset_peak(self, index: int) -> None:
        """Starts counting MemoryUse.peak again from what is allocated now."""

    @abstractmethod
    def allocate(self, index: int, nbytes: int) -> torch.Tensor:
        """`nbytes` of memory on device `index`, as a uint8 tensor (uninitialised)."""

    @abstractmethod
    def pinned_host(self, nbytes: int) -> torch.Tensor:
        """`nbytes` of host memory that the device copies from and to without staging
        (page-locked where the device needs that), as a uint8 tensor: allocated and
        registered once, for a staging pool to carve up, never per copy."""

    @abstractmethod
    def queue(self, index: int) -> Queue:
        """A new queue on device `index` (the compute queue, or a copy queue each way)."""

    def empty_like(self, index: int, tensor: torch.Tensor) -> torch.Tensor:
        """An uninitialised tensor of `tensor`'s shape and dtype in device `index`'s memory (through `allocate`)."""
        nbytes = tensor.numel() * tensor.element_size()
        return self.allocate(index, nbytes).view(tensor.dtype).reshape(tensor.shape)

    def synchronize(self, index: int) -> None:
        """Waits until the kernels the calling thread launched on device `index` have run,
        and no longer: not for copies on the device's other queues (the default: kernels
        that run as they are called, as in host memory)."""
        return None

    def register_host(self, address: int, nbytes: int) -> bool:
        """Page-locks `nbytes` of host memory at `address` for this backend's copies, in
        place, until unregister_host: done once for memory reused across calls (the core's
        arenas, weights copied on every call), never per copy. False where this backend
        cannot (its copies then stage through memory of its own), as CUDA refuses a range
        sharing a page with one registered already. The default: host memory needs no
        locking for a backend whose devices compute in it."""
        return True

    def unregister_host(self, address: int) -> None:
        """Ends a registration register_host made at `address`."""
        return None

    def capture(self, index: int, function: Callable[[], object]) -> CapturedGraph | None:
        """`function`'s kernels on device `index` recorded for replay, or None where the
        backend records none (the default: kernels run as they are called). Raises what
        recording raised where `function` cannot be recorded (it synchronizes, say)."""
        return None

    def has_own_memory(self, index: int) -> bool:
        """Whether device `index` computes in memory of its own (a GPU's), apart from host
        RAM: what `hold` keeps there is a copy of a host tensor, not the tensor itself."""
        return self.torch_device(index).type != "cpu"

    def hold(self, index: int, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` in device `index`'s memory for good (a resident weight): a copy there,
        complete when this returns, or `tensor` itself where it is in that memory already."""
        if tensor.device == self.torch_device(index):
            return tensor
        held = self.empty_like(index, tensor)
        queue = self.one_off_queue(index)
        queue.copy(held, tensor)
        queue.record().wait()
        return held

    def one_off_queue(self, index: int) -> Queue:
        """The queue of device `index` for copies made once and waited for (`hold`, a
        weight copied again after training), made on first use and kept: a CUDA queue is a
        stream from torch's pool of a few, handed out in turn, and a new one per copy would
        wrap that pool onto the streams a program's links and computes use."""
        queues = self.__dict__.setdefault("_one_off_queues", {})
        if index not in queues:  # two threads racing here make one queue too many, harmlessly
            queues[index] = self.queue(index)
        return queues[index]
