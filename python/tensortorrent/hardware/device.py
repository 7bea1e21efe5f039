"""Device: one place regions may compute, bound to the backend and index that run it.

The CPU, a declared virtual device and a real accelerator are each a Device: its name,
its memory tier and budget, its link with host RAM and its peer links, and its speeds:
the host's own for the CPU (regions are timed there), declared for a virtual device
(tt.VirtualDevice, the user's declaration, which it keeps), measured for an accelerator
(its link when found, each region's time when profiled). The planner, the lowering, the
runtime, artifacts and explain() see only Devices; target.py makes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..backends.cpu import CpuBackend
from ..backends.interface import DeviceBackend
from ..backends.virtual import VirtualBackend
from ..units import format_bytes
from .virtual import VirtualDevice

RAM = 0  # the memory tier of host RAM, where the CPU computes


@dataclass(frozen=True)
class Device:
    name: str
    backend: DeviceBackend
    index: int  # the device's position in its backend
    memory_bytes: int | None  # its budget; None for the CPU (host RAM's is the machine's)
    tier: int | None = None  # its memory tier in a plan (planning/machine.py numbers them); RAM for the CPU
    link_bandwidth: float = 0.0  # bytes/s between host RAM and it, the slower way (0: the CPU)
    link_latency_s: float = 0.0
    peers: tuple[tuple[str, float], ...] = ()  # devices it copies to directly, with bytes/s each way
    declaration: VirtualDevice | None = None  # a virtual device's declaration: its speeds
    region_seconds: tuple[float, ...] = ()  # an accelerator's time per region, measured there once profiled

    @property
    def is_cpu(self) -> bool:
        return isinstance(self.backend, CpuBackend)

    @property
    def declared(self) -> bool:
        """A virtual device: its instructions last at least their declared times."""
        return self.declaration is not None

    @property
    def measured(self) -> bool:
        """A real accelerator: its link and its regions' times are measured there."""
        return not self.is_cpu and not self.declared

    @property
    def own_memory(self) -> bool:
        """A device computing in memory of its own (a GPU): weights resident there are
        copies of the parameters in RAM."""
        return not self.is_cpu and self.backend.has_own_memory(self.index)

    def transfer_seconds(self, nbytes: int) -> float:
        """How long moving `nbytes` over its link with host RAM takes."""
        return self.link_latency_s + nbytes / self.link_bandwidth

    def peer_bandwidth(self, other: Device) -> float | None:
        """Bytes/s of a direct link from this device to `other` (the slower figure where
        both give one); None where values between them go through RAM."""
        if self.is_cpu or other.is_cpu or self.backend.kind != other.backend.kind:
            return None
        figures = [f for f in (dict(self.peers).get(other.name), dict(other.peers).get(self.name)) if f]
        return min(figures) if figures else None

    def compute_seconds(self, region: int, cpu_seconds: float, flops: float, bytes_touched: float) -> float:
        """A region's time here: as measured on the CPU, or on the accelerator; a virtual
        device is never faster than the CPU that really runs it, and otherwise takes as
        long as its declared speed says."""
        if self.is_cpu:
            return cpu_seconds
        if self.declared:
            return max(cpu_seconds, self.declaration.compute_seconds(flops, bytes_touched))
        return self.region_seconds[region]

    def describe(self) -> str:
        """What a device apart from the CPU is and where its figures come from, for explain()."""
        if self.declared:
            return (
                f"virtual, {format_bytes(self.memory_bytes)}, {self.declaration.flops / 1e9:g} GFLOP/s, "
                f"link {self.link_bandwidth / 1e9:g} GB/s each way + {self.link_latency_s * 1e6:g} us"
            )
        peers = "".join(f", peer link to {name} {rate / 1e9:.3g} GB/s" for name, rate in self.peers)
        return (
            f"{format_bytes(self.memory_bytes)} budget, {self.backend.kind} device, "
            f"link {self.link_bandwidth / 1e9:.3g} GB/s measured{peers}; region times measured there"
        )


def cpu_device() -> Device:
    return Device("cpu", CpuBackend(), 0, None, tier=RAM)


def virtual_devices(declared: Sequence[VirtualDevice]) -> list[Device]:
    """The declared devices, bound to one virtual backend (so that their peer links join them)."""
    backend = VirtualBackend(declared)
    return [
        Device(
            v.name,
            backend,
            index,
            v.memory_bytes,
            link_bandwidth=v.link_bandwidth,
            link_latency_s=v.link_latency_s,
            peers=v.peers,
            declaration=v,
        )
        for index, v in enumerate(declared)
    ]
