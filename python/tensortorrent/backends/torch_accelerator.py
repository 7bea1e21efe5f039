"""CUDA (ROCm builds share it) and XPU through torch's device APIs: streams, events,
asynchronous copies, the caching allocator's counters and page-locked host memory.

Nothing here creates a device context unless asked for live figures or for memory:
device counts and properties come from the runtime without one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from .interface import CapturedGraph, DeviceBackend, DeviceInfo, Event, MemoryUse, Queue

CUDA_HOST_REGISTER_PORTABLE = 1  # cudaHostRegisterPortable


def _drop_last_error() -> None:
    """A refused cudaHostRegister (or Unregister) leaves its error as the thread's last
    CUDA error, and torch's check after the next kernel launch (cudaGetLastError) would
    raise it in unrelated code. torch exposes no cudaGetLastError; that very check reads,
    and so clears, it: one tiny kernel, its error (the refusal's) dropped."""
    with contextlib.suppress(RuntimeError):
        torch.zeros(1, device="cuda")


class TorchEvent(Event):
    def __init__(self, event) -> None:
        self.event = event

    def done(self) -> bool:
        return bool(self.event.query())

    def wait(self) -> None:
        self.event.synchronize()


class TorchQueue(Queue):
    """A stream of its own: copies on it overlap work on other streams."""

    def __init__(self, module, device: torch.device) -> None:
        self._module = module
        self.stream = module.Stream(device=device)

    def copy(self, target: torch.Tensor, source: torch.Tensor) -> None:
        with self._module.stream(self.stream):
            target.copy_(source, non_blocking=True)

    def launching(self):
        return self._module.stream(self.stream)

    def record(self) -> Event:
        # A CUDA event that blocks: its waiter (a link's thread, a compute wait) sleeps
        # instead of spinning on a core the CPU's regions need.
        event = self._module.Event(blocking=True) if self._module is torch.cuda else self._module.Event()
        event.record(self.stream)
        return TorchEvent(event)

    def wait_for(self, event: Event) -> None:
        if isinstance(event, TorchEvent):
            self.stream.wait_event(event.event)
        elif not event.done():
            raise ValueError(f"a {type(self).__name__} cannot wait for an incomplete {type(event).__name__}")


class TorchGraph(CapturedGraph):
    def __init__(self, graph, outputs: object) -> None:
        self.graph, self.outputs = graph, outputs

    def replay(self) -> None:
        self.graph.replay()


class TorchAcceleratorBackend(DeviceBackend):
    """The devices of torch.cuda or torch.xpu (`kind`); none when torch has no such devices."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    @property
    def _module(self):
        return getattr(torch, self.kind)

    def available(self) -> bool:
        module = getattr(torch, self.kind, None)
        return module is not None and module.is_available()

    def devices(self, live: bool = True) -> list[DeviceInfo]:
        if not self.available():
            return []
        count = self._module.device_count()
        return [self._info(index, count, live) for index in range(count)]

    def _info(self, index: int, count: int, live: bool) -> DeviceInfo:
        properties = self._module.get_device_properties(index)
        total = int(getattr(properties, "total_memory", 0)) or None
        free = int(self._module.mem_get_info(index)[0]) if live and hasattr(self._module, "mem_get_info") else None
        capability, peers = None, ()
        if self.kind == "cuda":
            capability = f"{properties.major}.{properties.minor}"
            peers = tuple(
                f"cuda:{other}"
                for other in range(count)
                if live and other != index and torch.cuda.can_device_access_peer(index, other)
            )
        return DeviceInfo(
            name=f"{self.kind}:{index}",
            kind=self.kind,
            model=properties.name,
            total_bytes=total,  # the figure mem_get_info reports, without a context
            free_bytes=free,
            capability=capability,
            peers=peers,
        )

    def torch_device(self, index: int) -> torch.device:
        return torch.device(self.kind, index)

    def memory(self, index: int) -> MemoryUse:
        module = self._module
        total = int(getattr(module.get_device_properties(index), "total_memory", 0)) or None
        free = int(module.mem_get_info(index)[0]) if hasattr(module, "mem_get_info") else None
        return MemoryUse(total, free, int(module.memory_allocated(index)), int(module.max_memory_allocated(index)))

    def reset_peak(self, index: int) -> None:
        self._module.reset_peak_memory_stats(index)

    def synchronize(self, index: int) -> None:
        # The thread's current stream, where its kernels went: a device-wide synchronize
        # would also wait for the prefetches in flight on the copy streams.
        self._module.current_stream(self.torch_device(index)).synchronize()

    def allocate(self, index: int, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, device=self.torch_device(index))

    def pinned_host(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def queue(self, index: int) -> Queue:
        return TorchQueue(self._module, self.torch_device(index))

    def register_host(self, address: int, nbytes: int) -> bool:
        """cudaHostRegister, portable (every device's copies use it); XPU registers none."""
        if self.kind != "cuda":
            return False
        refused = int(torch.cuda.cudart().cudaHostRegister(address, nbytes, CUDA_HOST_REGISTER_PORTABLE)) != 0
        if refused:
            _drop_last_error()
        return not refused

    def unregister_host(self, address: int) -> None:
        if self.kind == "cuda" and int(torch.cuda.cudart().cudaHostUnregister(address)) != 0:
            _drop_last_error()

    def capture(self, index: int, function: Callable[[], object]) -> CapturedGraph | None:
        """A CUDA graph of `function` (XPU records none): run once on a side stream first,
        as torch asks before a capture, so lazy initialisations happen outside it."""
        if self.kind != "cuda":
            return None
        device = self.torch_device(index)
        with torch.cuda.device(device):
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                function()
            torch.cuda.current_stream(device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            current = torch.cuda.current_stream(device)
            # On this device's stream (torch's default capture stream belongs to the device
            # current when the process first captured), and an operation another thread runs
            # meanwhile neither fails nor invalidates the capture.
            try:
                with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
                    outputs = function()
            finally:
                # A capture that fails ends before torch restores the stream it replaced:
                # the thread's later kernels must not stay on the side stream.
                torch.cuda.set_stream(current)
        return TorchGraph(graph, outputs)
