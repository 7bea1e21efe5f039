"""Hardware: what this machine has (host probes, devices) and how much of it a plan may use."""

from .budgets import Budget, Budgets, hold_torch_threads, resolve_budgets
from .devices import DeviceInfo, discover_devices
from .fingerprint import hardware_fingerprint

__all__ = [
    "Budget",
    "Budgets",
    "DeviceInfo",
    "discover_devices",
    "hardware_fingerprint",
    "hold_torch_threads",
    "resolve_budgets",
]
