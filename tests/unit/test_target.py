"""resolve_target: tt.compile's and tt.load_compiled's devices, virtual devices and budgets
resolved once."""

from __future__ import annotations

import pytest

import tensortorrent as tt
from tensortorrent.planning.streaming import UNBOUNDED
from tensortorrent.target import resolve_target

SMALL = tt.VirtualDevice("small", memory_bytes=1 << 20, flops=1e9, link_bandwidth=1e9)


def test_a_target_holds_ram_at_its_budget_and_unbounded_for_a_streamed_placement():
    target = resolve_target("cpu", None, tt.CompileConfig(ram_budget_bytes=1 << 30))
    assert [device.name for device in target.machine.devices] == ["cpu"]
    assert target.machine.ram_bytes == target.budgets.ram.amount == 1 << 30
    assert target.streamed().ram_bytes == UNBOUNDED and target.streamed().devices == target.machine.devices
    assert target.missing == () and target.note() == ""


def test_virtual_devices_are_planned_on_where_named():
    target = resolve_target(["cpu", "small"], SMALL, tt.CompileConfig())
    assert [device.name for device in target.machine.devices] == ["cpu", "small"]
    assert [device.name for device in resolve_target("auto", SMALL, tt.CompileConfig()).machine.devices][0] == "cpu"


@pytest.mark.parametrize("devices", [3, [], ["cpu", 1]])
def test_devices_of_the_wrong_kind_are_refused_naming_what_was_given(devices):
    with pytest.raises(tt.InvalidArgumentError, match=r"tt.compile: devices: expected 'auto', 'cpu'.*got"):
        resolve_target(devices, None, tt.CompileConfig())


def test_an_unknown_device_is_refused_unless_a_load_may_leave_it_out():
    with pytest.raises(tt.InvalidArgumentError, match="unknown device 'gone'"):
        resolve_target(["cpu", "gone"], None, tt.CompileConfig(), "tt.load_compiled")
    target = resolve_target(["cpu", "gone"], None, tt.CompileConfig(), "tt.load_compiled", here_only=True)
    assert [device.name for device in target.machine.devices] == ["cpu"] and target.missing == ("gone",)
    assert "compiled for gone too" in target.note()
