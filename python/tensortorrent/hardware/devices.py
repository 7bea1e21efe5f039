"""Devices as their backends discover them: the CPU always, then CUDA (and ROCm) and XPU
accelerators when present, then the devices of third-party backends (backends/)."""

from __future__ import annotations

import time

import torch

from ..backends import DeviceInfo, backends
from ..backends.cpu import CpuBackend

ACCELERATOR_KINDS = ("cuda", "xpu")

__all__ = ["ACCELERATOR_KINDS", "DeviceInfo", "absent_kinds", "discover_devices", "names_accelerator"]


def discover_devices(accelerators: bool = True, live: bool = True) -> list[DeviceInfo]:
    """The CPU, then (with `accelerators`) every other backend's devices. Memory of the
    CPU is a host tier.

    `live` adds each CUDA device's free memory and its peers. cudaMemGetInfo and the peer
    query create a CUDA context on every device (hundreds of MiB each, held until exit),
    so callers that need only what each device is (the fingerprint) pass live=False:
    device counts and properties come from the runtime without a context.
    """
    if not accelerators:
        return CpuBackend().devices(live)
    return [device for backend in backends() for device in backend.devices(live)]


def names_accelerator(devices: object) -> bool:
    """Whether tt.compile's `devices` may mean a real accelerator ("auto", cuda*, xpu*, or
    any backend's "kind:index"): only then may a plan use one, and so only then is there a
    reason to discover them."""
    requested = [devices] if isinstance(devices, str) else devices
    return isinstance(requested, (list, tuple)) and any(
        isinstance(name, str) and (name == "auto" or name.startswith(ACCELERATOR_KINDS) or ":" in name)
        for name in requested
    )


def absent_kinds(devices: list[DeviceInfo]) -> list[str]:
    """Accelerator kinds looked for and not found."""
    present = {device.kind for device in devices}
    return [kind for kind in ACCELERATOR_KINDS if kind not in present]


def measure_host_to_device_bandwidth(device: str, nbytes: int = 256 << 20) -> float:
    """Bytes per second of a pinned host-to-device copy (best of three), measured now."""
    source = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    target = torch.empty(nbytes, dtype=torch.uint8, device=device)
    module = getattr(torch, torch.device(device).type)
    best = float("inf")
    for _ in range(3):
        module.synchronize(target.device)  # that device: synchronize() alone waits for the current one
        start = time.perf_counter()
        target.copy_(source, non_blocking=True)
        module.synchronize(target.device)
        best = min(best, time.perf_counter() - start)
    return nbytes / best
