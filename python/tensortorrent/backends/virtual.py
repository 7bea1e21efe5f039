"""The virtual backend: declared devices (tt.VirtualDevice) that compute on the CPU,
each with the memory capacity it declares (an allocation beyond it fails) and the peer
links it declares (copies between peers are memcpy, like every copy here)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .host_memory import HostMemoryBackend
from .interface import DeviceInfo

if TYPE_CHECKING:  # the declarations are read, never made, here: hardware builds on backends
    from ..hardware.virtual import VirtualDevice


class VirtualBackend(HostMemoryBackend):
    kind = "virtual"

    def __init__(self, declared: Sequence[VirtualDevice]) -> None:
        super().__init__([device.memory_bytes for device in declared])
        self.declared = tuple(declared)

    def devices(self, live: bool = True) -> list[DeviceInfo]:
        return [
            DeviceInfo(
                name=device.name,
                kind=self.kind,
                model=f"declared: {device.flops:.3g} FLOP/s, link {device.link_bandwidth:.3g} B/s",
                total_bytes=device.memory_bytes,
                free_bytes=self.memory(index).free if live else None,
                peers=self._peers_of(device) if live else (),
            )
            for index, device in enumerate(self.declared)
        ]

    def _peers_of(self, device: VirtualDevice) -> tuple[str, ...]:
        """The declared devices a peer link joins to `device`, declared on either side."""
        return tuple(
            other.name
            for other in self.declared
            if other is not device and (device.peer_bandwidth(other.name) or other.peer_bandwidth(device.name))
        )
