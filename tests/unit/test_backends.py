"""Device backends: the built-in ones and a third party's (through an entry point) pass
the conformance checks; the checks catch a backend that breaks a promise; plugins that
fail are left out and named."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import tensortorrent as tt
from tensortorrent.backends import registry
from tensortorrent.backends.conformance import CHECKS, ConformanceError, check_backend
from tensortorrent.backends.cpu import CpuBackend
from tensortorrent.backends.host_memory import HostMemoryBackend, SyncQueue
from tensortorrent.backends.interface import DeviceInfo
from tensortorrent.backends.torch_accelerator import TorchAcceleratorBackend
from tensortorrent.backends.virtual import VirtualBackend
from tensortorrent.cli.doctor import report as doctor_report
from tensortorrent.hardware import discover_devices
from tensortorrent.hardware.accelerator import with_peer_links
from tensortorrent.hardware.device import Device


def test_the_cpu_backend_conforms():
    passed = check_backend(CpuBackend())
    assert passed == [f"{check.__name__}: cpu" for check in CHECKS]


def test_the_virtual_backend_conforms_and_refuses_memory_beyond_its_capacity():
    backend = VirtualBackend(
        [tt.VirtualDevice("fast", 1 << 30, 1e12, 1e10), tt.VirtualDevice("small", 4 << 20, 1e11, 1e9)]
    )
    assert len(check_backend(backend)) == 2 * len(CHECKS)
    held = backend.allocate(1, 3 << 20)
    with pytest.raises(tt.MemoryCapacityError, match=r"small: cannot allocate 2097152 bytes .* 3145728 of its 4194304"):
        backend.allocate(1, 2 << 20)
    assert backend.memory(1).free == 1 << 20 and backend.devices()[1].free_bytes == 1 << 20
    del held
    assert backend.memory(1).free == 4 << 20
    with pytest.raises(IndexError, match="virtual: no device 2; it has 2"):
        backend.memory(2)


def test_virtual_devices_list_their_peer_links_both_ways_and_copy_between_them():
    backend = VirtualBackend(
        [
            tt.VirtualDevice("a", 4 << 20, 1e11, 1e9, peers={"b": 50e9}),
            tt.VirtualDevice("b", 4 << 20, 1e11, 1e9),
            tt.VirtualDevice("c", 4 << 20, 1e11, 1e9),
        ]
    )
    assert [d.peers for d in backend.devices()] == [("b",), ("a",), ()]
    assert [d.peers for d in backend.devices(live=False)] == [(), (), ()]
    assert "check_peer_copies: a" in check_backend(backend)


class PeerBackend(HostMemoryBackend):
    """Two devices in host memory that report peer access to each other."""

    kind = "peered"

    def __init__(self) -> None:
        super().__init__([64 << 20, 64 << 20])

    def devices(self, live: bool = True) -> list[DeviceInfo]:
        return [
            DeviceInfo(f"peered:{i}", self.kind, "test", 64 << 20, None, peers=(f"peered:{1 - i}",) if live else ())
            for i in range(2)
        ]


class StrangerPeerBackend(PeerBackend):
    """Reports peer access to a device that is not one of its own."""

    def devices(self, live: bool = True) -> list[DeviceInfo]:
        return [replace(device, peers=("peered:9",)) for device in super().devices(live)]


def test_peer_copies_are_checked_and_their_links_measured():
    assert "check_peer_copies: peered:1" in check_backend(PeerBackend())
    with pytest.raises(ConformanceError, match=r"peer copies on peered:0: peer 'peered:9' is not one of its backend"):
        check_backend(StrangerPeerBackend())
    backend = PeerBackend()
    found = {f"peered:{i}": Device(f"peered:{i}", backend, i, 8 << 20, link_bandwidth=1e9) for i in range(2)}
    linked = with_peer_links(found)
    rate = dict(linked["peered:0"].peers)["peered:1"]
    assert rate > 0 and linked["peered:1"].peers == (("peered:0", rate),)
    assert "peer link to peered:1" in linked["peered:0"].describe()


def test_accelerator_backends_without_their_devices_list_none():
    for kind in ("cuda", "xpu"):
        backend = TorchAcceleratorBackend(kind)
        if backend.available():
            pytest.skip(f"this machine has {kind} devices: tests/device checks them")
        assert backend.devices() == [] and backend.devices(live=False) == []


def test_a_third_party_backend_registered_by_an_entry_point_is_discovered_and_conforms(plugins_from):
    plugins_from("good")
    backend = registry.backend_of("example")
    assert backend is not None and registry.plugin_problems() == []
    assert len(check_backend(backend)) == len(CHECKS)
    names = [device.name for device in discover_devices()]
    assert names[0] == "cpu" and "example:0" in names
    assert "example:0" not in [device.name for device in discover_devices(accelerators=False)]


def test_plugins_that_fail_are_left_out_and_named(plugins_from):
    plugins_from("broken")
    problems = registry.plugin_problems()
    assert len(problems) == 2
    assert any(
        "'broken' (tt_no_such_module:Backend)" in p and "failed to load: ModuleNotFoundError" in p for p in problems
    )
    assert any("'not_a_backend'" in p and "gave a dict, expected a tensortorrent DeviceBackend" in p for p in problems)
    assert [device.name for device in discover_devices()][0] == "cpu", "the other devices are still found"
    data = doctor_report(measure_bandwidth=False)
    assert not data["healthy"] and data["backends"][:3] == ["cpu", "cuda", "xpu"]
    failed = [c["detail"] for c in data["checks"] if c["name"] == "device backend plugin"]
    assert failed == problems


class DroppingQueue(SyncQueue):
    """Breaks a promise: its copies never happen."""

    def copy(self, target: torch.Tensor, source: torch.Tensor) -> None:
        return None


class ForgetfulBackend(CpuBackend):
    def queue(self, index: int):
        return DroppingQueue()


def test_the_checks_catch_a_backend_that_breaks_a_promise():
    with pytest.raises(ConformanceError, match="copies and events on cpu: the bytes copied there and back differ"):
        check_backend(ForgetfulBackend())
    with pytest.raises(ConformanceError, match="expected a tensortorrent DeviceBackend, got str"):
        check_backend("cpu")
