"""A third party's device backend, as a package would ship one: registered in its
metadata under the `tensortorrent.backends` entry-point group (see the dist-info beside it)."""

from tensortorrent.backends.host_memory import HostMemoryBackend
from tensortorrent.backends.interface import DeviceInfo


class ExampleBackend(HostMemoryBackend):
    kind = "example"

    def __init__(self) -> None:
        super().__init__([64 << 20])

    def devices(self, live: bool = True) -> list[DeviceInfo]:
        free = self.memory(0).free if live else None
        return [DeviceInfo(name="example:0", kind="example", model="an example", total_bytes=64 << 20, free_bytes=free)]
