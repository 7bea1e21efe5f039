"""Real devices (CUDA, XPU, a third party's) as the planner sees them: their memory budget,
their link's speed measured through their backend, and each region's time measured on
them. A virtual device declares these figures instead (hardware/virtual.py)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..backends import backends
from ..backends.interface import DeviceBackend
from ..partition.region_module import on_device

AUTO_KINDS = ("cuda", "xpu")  # what devices="auto" takes besides the CPU: torch's own accelerators
LINK_PROBE_BYTES = 16 << 20
LINK_PROBE_ROUNDS = 3


@dataclass(frozen=True)
class Accelerator:
    """A real device a plan may use: `index` of `backend`."""

    name: str
    memory_bytes: int  # its budget (vram_budget_bytes, or its free memory less a reserve)
    link_bandwidth: float  # bytes/s, the slower way between host RAM and the device, measured
    backend: DeviceBackend
    index: int
    region_seconds: tuple[float, ...] = ()  # per region, measured there (empty until profiled)
    link_latency_s: float = 0.0

    def transfer_seconds(self, nbytes: int) -> float:
        return self.link_latency_s + nbytes / self.link_bandwidth

    def describe(self) -> str:
        return (
            f"{self.backend.kind} device, link {self.link_bandwidth / 1e9:.3g} GB/s measured; "
            "region times measured there"
        )


def find_device(name: str) -> tuple[DeviceBackend, int] | None:
    """The backend and index of the device called `name` ("cuda:0", "example:0"), if one has it."""
    for backend in backends():
        for index, device in enumerate(backend.devices(live=False)):
            if device.name == name:
                return backend, index
    return None


def measure_link(backend: DeviceBackend, index: int, nbytes: int = LINK_PROBE_BYTES) -> float:
    """Bytes per second of the slower way between pinned host memory and device `index`,
    through the backend's own queue and events (best of LINK_PROBE_ROUNDS each way)."""
    host, device = backend.pinned_host(nbytes), backend.allocate(index, nbytes)
    slowest = 0.0
    for target, source in ((device, host), (host, device)):
        queue, best = backend.queue(index), math.inf
        for _ in range(LINK_PROBE_ROUNDS):
            start = time.perf_counter()
            queue.copy(target, source)
            queue.record().wait()
            best = min(best, time.perf_counter() - start)
        slowest = max(slowest, best)
    return nbytes / max(slowest, 1e-9)


def accelerator(name: str, memory_bytes: int) -> Accelerator | None:
    """The device called `name` with its link measured now; None when no backend has it."""
    found = find_device(name)
    if found is None:
        return None
    backend, index = found
    return Accelerator(name, memory_bytes, measure_link(backend, index), backend, index)


def named_accelerators(devices: object, budgets) -> dict[str, Accelerator]:
    """The real accelerators tt.compile's `devices` names (with "auto": every device of
    AUTO_KINDS found), found, measured, and each given its memory budget (from `budgets`,
    which has one for every device discovered)."""
    requested = [devices] if isinstance(devices, str) else devices if isinstance(devices, (list, tuple)) else []
    if list(requested) == ["auto"]:
        requested = [name for name in budgets.devices if name.split(":")[0] in AUTO_KINDS]
    found = {}
    for name in requested:
        if isinstance(name, str) and name in budgets.devices:
            device = accelerator(name, budgets.devices[name].amount)
            if device is not None:
                found[name] = device
    return found


def profiled(device: Accelerator, runner, flat_inputs: Sequence[Any]) -> Accelerator:
    """`device` with each region's time measured on it: one region at a time (its inputs
    and weights copied there, run twice, the faster taken), so a model larger than the
    device still profiles; the values come from running each region on the CPU."""
    backend, index = device.backend, device.index
    where = backend.torch_device(index)
    call = runner.new_call(list(flat_inputs))
    seconds = []
    with torch.no_grad():
        for region, kernel in enumerate(runner.kernels):
            inputs = [_there(backend, index, call.env[slot]) for slot in kernel.in_slots]
            forward = on_device(kernel.module, where).forward
            best = math.inf
            for _ in range(2):
                start = time.perf_counter()
                forward(*inputs)
                backend.synchronize(index)
                best = min(best, time.perf_counter() - start)
            seconds.append(best)
            del inputs
            call.run_region(region)
    return replace(device, region_seconds=tuple(seconds))


def _there(backend: DeviceBackend, index: int, value: Any) -> Any:
    return backend.hold(index, value) if isinstance(value, torch.Tensor) else value
