"""Devices through torch: the CPU always, CUDA (and ROCm) and XPU accelerators when present."""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass

import torch

ACCELERATOR_KINDS = ("cuda", "xpu")


@dataclass(frozen=True)
class DeviceInfo:
    """One compute device as discovered; figures torch cannot give are None, never guessed."""

    name: str  # "cpu", "cuda:0", "xpu:0"
    kind: str
    model: str
    total_bytes: int | None
    free_bytes: int | None
    capability: str | None = None  # CUDA compute capability, e.g. "9.0"
    peers: tuple[str, ...] = ()  # devices it can access directly


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what platform knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def discover_devices(accelerators: bool = True, live: bool = True) -> list[DeviceInfo]:
    """The CPU, then (with `accelerators`) every accelerator torch can see. Memory of the
    CPU is a host tier.

    `live` adds each CUDA device's free memory and its peers. cudaMemGetInfo and the peer
    query create a CUDA context on every device (hundreds of MiB each, held until exit),
    so callers that need only what each device is (the fingerprint) pass live=False:
    device counts and properties come from the runtime without a context.
    """
    devices = [DeviceInfo(name="cpu", kind="cpu", model=cpu_model(), total_bytes=None, free_bytes=None)]
    if not accelerators:
        return devices
    if torch.cuda.is_available():
        devices += [_cuda(index, live) for index in range(torch.cuda.device_count())]
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        devices += [_xpu(index) for index in range(xpu.device_count())]
    return devices


def names_accelerator(devices: object) -> bool:
    """Whether tt.compile's `devices` names a real accelerator (cuda*, xpu*): only then may
    a plan use one, and so only then is there a reason to discover them."""
    requested = [devices] if isinstance(devices, str) else devices
    return isinstance(requested, (list, tuple)) and any(
        isinstance(name, str) and name.startswith(ACCELERATOR_KINDS) for name in requested
    )


def absent_kinds(devices: list[DeviceInfo]) -> list[str]:
    """Accelerator kinds looked for and not found."""
    present = {device.kind for device in devices}
    return [kind for kind in ACCELERATOR_KINDS if kind not in present]


def _cuda(index: int, live: bool) -> DeviceInfo:
    properties = torch.cuda.get_device_properties(index)
    free = int(torch.cuda.mem_get_info(index)[0]) if live else None
    peers = tuple(
        f"cuda:{other}"
        for other in range(torch.cuda.device_count())
        if live and other != index and torch.cuda.can_device_access_peer(index, other)
    )
    return DeviceInfo(
        name=f"cuda:{index}",
        kind="cuda",
        model=properties.name,
        total_bytes=int(properties.total_memory),  # the figure cudaMemGetInfo reports, without a context
        free_bytes=free,
        capability=f"{properties.major}.{properties.minor}",
        peers=peers,
    )


def _xpu(index: int) -> DeviceInfo:
    properties = torch.xpu.get_device_properties(index)
    total = int(getattr(properties, "total_memory", 0)) or None
    return DeviceInfo(name=f"xpu:{index}", kind="xpu", model=properties.name, total_bytes=total, free_bytes=None)


def measure_host_to_device_bandwidth(device: str, nbytes: int = 256 << 20) -> float:
    """Bytes per second of a pinned host-to-device copy (best of three), measured now."""
    source = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    target = torch.empty(nbytes, dtype=torch.uint8, device=device)
    module = getattr(torch, torch.device(device).type)
    best = float("inf")
    for _ in range(3):
        module.synchronize()
        start = time.perf_counter()
        target.copy_(source, non_blocking=True)
        module.synchronize()
        best = min(best, time.perf_counter() - start)
    return nbytes / best
