"""Device backends: the interface every kind of device implements, the built-in ones
(CPU, CUDA/ROCm, XPU, virtual) and third parties' through entry points."""

from .interface import DeviceBackend, DeviceInfo, Event, MemoryUse, Queue
from .registry import GROUP, backend_of, backends, plugin_backends, plugin_problems

__all__ = [
    "GROUP",
    "DeviceBackend",
    "DeviceInfo",
    "Event",
    "MemoryUse",
    "Queue",
    "backend_of",
    "backends",
    "plugin_backends",
    "plugin_problems",
]
