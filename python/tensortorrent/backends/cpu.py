"""The CPU backend: one device, "cpu", computing in host RAM."""

from __future__ import annotations

import platform

from .host_memory import HostMemoryBackend
from .interface import DeviceInfo


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


class CpuBackend(HostMemoryBackend):
    """Host RAM is a tier of its own, budgeted by ram_budget_bytes, so the device's
    capacity here is unbounded."""

    kind = "cpu"

    def __init__(self) -> None:
        super().__init__([None])

    def devices(self, live: bool = True) -> list[DeviceInfo]:
        return [DeviceInfo(name="cpu", kind="cpu", model=cpu_model(), total_bytes=None, free_bytes=None)]
