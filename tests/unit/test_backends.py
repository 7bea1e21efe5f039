"""Device backends: the built-in ones and a third party's (through an entry point) pass
the conformance checks; the checks catch a backend that breaks a promise; plugins that
fail are left out and named."""

from __future__ import annotations

import pytest
import torch

import tensortorrent as tt
from tensortorrent.backends import registry
from tensortorrent.backends.conformance import CHECKS, ConformanceError, check_backend
from tensortorrent.backends.cpu import CpuBackend
from tensortorrent.backends.host_memory import SyncQueue
from tensortorrent.backends.torch_accelerator import TorchAcceleratorBackend
from tensortorrent.backends.virtual import VirtualBackend
from tensortorrent.cli.doctor import report as doctor_report
from tensortorrent.hardware import discover_devices


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
