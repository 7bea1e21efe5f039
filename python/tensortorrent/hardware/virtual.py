"""tt.VirtualDevice: a declared accelerator that computes on the CPU at its own declared speed.

It has its own memory capacity, and the runtime holds its transfers and computations
until they have taken as long as the declared speeds say (never less than the CPU
really took). It runs every multi-device path (placement, transfers, residency,
release after last use) on a machine without a GPU. It is never chosen unless named in
tt.compile's `devices`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ConfigTypeError, ConfigValueError, InvalidArgumentError

RESERVED_NAMES = ("auto", "cpu", "ram", "disk")


@dataclass(frozen=True)
class VirtualDevice:
    """name: how `devices` and reports refer to it. memory_bytes: its memory capacity.
    flops: its arithmetic rate (FLOP/s). link_bandwidth: bytes/s over its link with host
    RAM, each way. link_latency_s: fixed cost of every transfer. memory_bandwidth: bytes/s
    to its own memory (None: compute time follows from FLOPs alone)."""

    name: str
    memory_bytes: int
    flops: float
    link_bandwidth: float
    link_latency_s: float = 0.0
    memory_bandwidth: float | None = None

    def __post_init__(self) -> None:
        where = f"VirtualDevice({self.name!r})"
        if not isinstance(self.name, str) or not self.name:
            raise ConfigTypeError(f"VirtualDevice.name: expected a non-empty string, got {self.name!r}")
        if self.name in RESERVED_NAMES or self.name.startswith(("cuda", "xpu")) or not self.name.isidentifier():
            raise ConfigValueError(
                f"VirtualDevice.name: expected an identifier other than {', '.join(RESERVED_NAMES)} and "
                f"real device names (cuda*, xpu*), got {self.name!r}"
            )
        if isinstance(self.memory_bytes, bool) or not isinstance(self.memory_bytes, int):
            raise ConfigTypeError(f"{where}.memory_bytes: expected an int, got {type(self.memory_bytes).__name__}")
        if self.memory_bytes <= 0:
            raise ConfigValueError(f"{where}.memory_bytes: expected an int > 0, got {self.memory_bytes}")
        for field_name in ("flops", "link_bandwidth", "memory_bandwidth"):
            value = getattr(self, field_name)
            if value is None and field_name == "memory_bandwidth":
                continue
            _check_number(f"{where}.{field_name}", value, positive=True)
        _check_number(f"{where}.link_latency_s", self.link_latency_s, positive=False)

    def compute_seconds(self, flops: float, bytes_touched: float) -> float:
        """Roofline time of a computation here: arithmetic or memory traffic, whichever is longer."""
        memory = bytes_touched / self.memory_bandwidth if self.memory_bandwidth else 0.0
        return max(flops / self.flops, memory)

    def transfer_seconds(self, nbytes: int) -> float:
        """How long moving `nbytes` over its link takes."""
        return self.link_latency_s + nbytes / self.link_bandwidth


def _check_number(name: str, value: object, *, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigTypeError(f"{name}: expected a number, got {type(value).__name__} ({value!r})")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise ConfigValueError(f"{name}: expected a finite number {bound}, got {value}")


def check_machine(machine: object) -> tuple[VirtualDevice, ...]:
    """The declared machine: a VirtualDevice or a list of them, with distinct names."""
    if machine is None:
        return ()
    devices = [machine] if isinstance(machine, VirtualDevice) else machine
    if not isinstance(devices, (list, tuple)) or not all(isinstance(d, VirtualDevice) for d in devices):
        raise InvalidArgumentError(
            f"tt.compile: machine: expected a tt.VirtualDevice or a list of them, got {type(machine).__name__}"
        )
    names = [d.name for d in devices]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InvalidArgumentError(f"tt.compile: machine: device names must be distinct, got {repeated} twice")
    return tuple(devices)
