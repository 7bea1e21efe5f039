"""Real devices (CUDA, XPU, a third party's) found and measured as Devices (hardware/device.py):
their memory budget, their link's speed measured through their backend, and each
region's time measured on them. A virtual device declares these figures instead
(hardware/virtual.py)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch

from ..backends import backends
from ..backends.interface import DeviceBackend, Queue
from ..partition.region_module import on_device
from .device import Device

AUTO_KINDS = ("cuda", "xpu")  # what devices="auto" takes besides the CPU: torch's own accelerators
LINK_PROBE_BYTES = 16 << 20
LINK_PROBE_ROUNDS = 3


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
    return _slower_way(backend.queue(index), backend.queue(index), device, host, nbytes)


def measure_peer_link(backend: DeviceBackend, first: int, second: int, nbytes: int = LINK_PROBE_BYTES) -> float:
    """Bytes per second of the slower way between devices `first` and `second` of
    `backend`, each way on the sending device's queue (best of LINK_PROBE_ROUNDS each)."""
    a, b = backend.allocate(first, nbytes), backend.allocate(second, nbytes)
    return _slower_way(backend.queue(second), backend.queue(first), a, b, nbytes)


def _slower_way(to_a: Queue, to_b: Queue, a: torch.Tensor, b: torch.Tensor, nbytes: int) -> float:
    """Bytes/s of the slower of copying b into a on queue `to_a` and a into b on `to_b`."""
    slowest = 0.0
    for queue, target, source in ((to_a, a, b), (to_b, b, a)):
        best = math.inf
        for _ in range(LINK_PROBE_ROUNDS):
            start = time.perf_counter()
            queue.copy(target, source)
            queue.record().wait()
            best = min(best, time.perf_counter() - start)
        slowest = max(slowest, best)
    return nbytes / max(slowest, 1e-9)


def accelerator(name: str, memory_bytes: int) -> Device | None:
    """The device called `name` with its link measured now; None when no backend has it."""
    found = find_device(name)
    if found is None:
        return None
    backend, index = found
    return Device(name, backend, index, memory_bytes, link_bandwidth=measure_link(backend, index))


def named_accelerators(devices: object, budgets) -> dict[str, Device]:
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
    return with_peer_links(found)


def with_peer_links(found: dict[str, Device]) -> dict[str, Device]:
    """`found` with the direct links between devices of one backend that reports peer
    access between them measured (each pair once) and recorded on both."""
    peers: dict[str, list[tuple[str, float]]] = {name: [] for name in found}
    names = list(found)
    for position, name in enumerate(names):
        device = found[name]
        reachable = device.backend.devices(live=True)[device.index].peers
        for other in names[position + 1 :]:
            peer = found[other]
            if peer.backend.kind == device.backend.kind and other in reachable:
                rate = measure_peer_link(device.backend, device.index, peer.index)
                peers[name].append((other, rate))
                peers[other].append((name, rate))
    return {name: replace(device, peers=tuple(sorted(peers[name]))) for name, device in found.items()}


def profiled(
    device: Device, runner, flat_inputs: Sequence[Any], load: Callable[[int], torch.Tensor] | None = None
) -> Device:
    """`device` with each region's time measured on it: one region at a time (its inputs
    and weights copied there, run twice, the faster taken), so a model larger than the
    device still profiles; the values come from running each region on the CPU. `load`
    gives the weight of a bound slot whose value the runner does not hold (None: a
    weight read from a checkpoint), read for its region and let go after it, so RAM
    never holds more than one region's weights."""
    backend, index = device.backend, device.index
    where = backend.torch_device(index)
    call = runner.new_call(list(flat_inputs))
    seconds = []
    with torch.no_grad():
        for region, kernel in enumerate(runner.kernels):
            bound = [s for s in kernel.in_slots if s < runner.bound_count]
            loaded = [s for s in bound if call.env[s] is None] if load is not None else []
            for slot in loaded:
                call.env[slot] = load(slot)
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
            for slot in loaded:
                call.env[slot] = None
    return replace(device, region_seconds=tuple(seconds))


def _there(backend: DeviceBackend, index: int, value: Any) -> Any:
    return backend.hold(index, value) if isinstance(value, torch.Tensor) else value
