"""A device backend whose device has memory of its own, as a GPU has, for the tests of
what that changes (resident weights are copies of the model's tensors, apart from them):
its kernels still compute in host memory, so it runs anywhere."""

import torch

from tensortorrent.backends.host_memory import HostMemoryBackend
from tensortorrent.backends.interface import DeviceInfo


class ApartBackend(HostMemoryBackend):
    kind = "apart"

    def __init__(self) -> None:
        super().__init__([64 << 20])

    def devices(self, live: bool = True) -> list[DeviceInfo]:
        free = self.memory(0).free if live else None
        return [DeviceInfo(name="apart:0", kind="apart", model="memory apart", total_bytes=64 << 20, free_bytes=free)]

    def has_own_memory(self, index: int) -> bool:
        return True

    def hold(self, index: int, tensor: torch.Tensor) -> torch.Tensor:
        held = self.empty_like(index, tensor)  # a copy, even of a tensor in host memory
        held.copy_(tensor)
        return held
