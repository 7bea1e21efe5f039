"""tt.VirtualDevice: a declared accelerator that computes on the CPU at its own declared speed.

It has its own memory capacity, and the runtime holds its transfers and computations
until they have taken as long as the declared speeds say (never less than the CPU
really took). It runs every multi-device path (placement, transfers, residency,
release after last use) on a machine without a GPU. It is never chosen unless named in
tt.compile's `devices`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ConfigTypeError, ConfigValueError, InvalidArgumentError

RESERVED_NAMES = ("auto", "cpu", "ram", "disk")


@dataclass(frozen=True)
class VirtualDevice:
    """name: how `devices` and reports refer to it. memory_bytes: its memory capacity.
    flops: its arithmetic rate (FLOP/s). link_bandwidth: bytes/s over its link with host
    RAM, each way. link_latency_s: fixed cost of every transfer. memory_bandwidth: bytes/s
    to its own memory (None: compute time follows from FLOPs alone). peers: the devices it
    copies to and from directly, without staging through host RAM (as GPUs joined by NVLink
    or PCIe peer access do), each with the bytes/s of that link, each way: a mapping
    {name: bandwidth}, kept as (name, bandwidth) pairs sorted by name. A peer link declared
    on either of two devices joins both; declared on both, the slower figure holds."""

    name: str
    memory_bytes: int
    flops: float
    link_bandwidth: float
    link_latency_s: float = 0.0
    memory_bandwidth: float | None = None
    peers: Mapping[str, float] | tuple[tuple[str, float], ...] = ()

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
        object.__setattr__(self, "peers", _checked_peers(where, self.name, self.peers))

    def peer_bandwidth(self, other: str) -> float | None:
        """Bytes/s of its declared direct link to device `other`; None without one."""
        return dict(self.peers).get(other)

    def compute_seconds(self, flops: float, bytes_touched: float) -> float:
        """Roofline time of a computation here: arithmetic or memory traffic, whichever is longer."""
        memory = bytes_touched / self.memory_bandwidth if self.memory_bandwidth else 0.0
        return max(flops / self.flops, memory)

    def transfer_seconds(self, nbytes: int) -> float:
        """How long moving `nbytes` over its link takes."""
        return self.link_latency_s + nbytes / self.link_bandwidth


def _checked_peers(where: str, name: str, peers: object) -> tuple[tuple[str, float], ...]:
    pairs = list(peers.items()) if isinstance(peers, Mapping) else peers
    if not isinstance(pairs, (tuple, list)) or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in pairs):
        raise ConfigTypeError(f"{where}.peers: expected a mapping of device names to bytes/s, got {peers!r}")
    checked = {}
    for other, bandwidth in pairs:
        if not isinstance(other, str) or not other:
            raise ConfigTypeError(f"{where}.peers: expected device names as keys, got {other!r}")
        if other == name:
            raise ConfigValueError(f"{where}.peers: a device is not its own peer, got {other!r}")
        _check_number(f"{where}.peers[{other!r}]", bandwidth, positive=True)
        checked[other] = float(bandwidth)
    return tuple(sorted(checked.items()))


def _check_number(name: str, value: object, *, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigTypeError(f"{name}: expected a number, got {type(value).__name__} ({value!r})")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise ConfigValueError(f"{name}: expected a finite number {bound}, got {value}")


def check_machine(machine: object, caller: str = "tt.compile") -> tuple[VirtualDevice, ...]:
    """The declared machine: a VirtualDevice or a list of them, with distinct names."""
    if machine is None:
        return ()
    devices = [machine] if isinstance(machine, VirtualDevice) else machine
    if not isinstance(devices, (list, tuple)) or not all(isinstance(d, VirtualDevice) for d in devices):
        raise InvalidArgumentError(
            f"{caller}: machine: expected a tt.VirtualDevice or a list of them, got {type(machine).__name__}"
        )
    names = [d.name for d in devices]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InvalidArgumentError(f"{caller}: machine: device names must be distinct, got {repeated} twice")
    for device in devices:
        unknown = [other for other, _ in device.peers if other not in names]
        if unknown:
            raise InvalidArgumentError(
                f"{caller}: machine: {device.name!r} declares peers {unknown} that the machine does not "
                f"declare (it has {names})"
            )
    return tuple(devices)
