"""The native discrete-event simulator as seen from Python (paired with cpp/bindings/sim.cc)."""

from __future__ import annotations

import pytest

import tensortorrent as tt
from tensortorrent import _core

K = _core.SimTaskKind


def machine() -> _core.MachineModel:
    """A fast device with 1000 bytes of memory, fed from RAM over a 100 B/s link (0.5 s latency)."""
    return _core.MachineModel(
        tiers=[_core.TierModel(name="dev", capacity_bytes=1000), _core.TierModel(name="ram", capacity_bytes=10_000)],
        devices=[
            _core.DeviceModel(name="dev", flops_per_s=100.0, memory_bytes_per_s=50.0, memory_tier=0),
            _core.DeviceModel(name="cpu", flops_per_s=10.0, memory_bytes_per_s=10.0, memory_tier=1),
        ],
        links=[_core.LinkModel(name="h2d", from_tier=1, to_tier=0, bytes_per_s=100.0, latency_s=0.5)],
    )


def test_prefetch_overlaps_loads_with_compute():
    tasks = []
    for layer in range(3):  # load layer i (1.5 s) on the link while layer i-1 computes (2 s)
        load, compute = 2 * layer, 2 * layer + 1
        tasks.append(
            _core.SimTask(
                id=load,
                kind=K.Transfer,
                resource=0,
                bytes=100,
                label=f"load{layer}",
                allocate_at_start=[_core.MemoryEffect(tier=0, bytes=400)],
            )
        )
        deps = [load] + ([compute - 2] if layer else [])
        tasks.append(
            _core.SimTask(
                id=compute,
                kind=K.Compute,
                resource=0,
                seconds=2.0,
                deps=deps,
                label=f"layer{layer}",
                release_at_end=[_core.MemoryEffect(tier=0, bytes=400)],
            )
        )
    result = _core.simulate(machine(), tasks)
    assert result.makespan_s == pytest.approx(7.5)  # 1.5 s first load, then three 2 s layers
    assert result.critical_path == [0, 1, 3, 5]
    assert result.bytes_moved == [300]
    assert result.peak_bytes[0] == 1200 and result.over_capacity_tiers == [0]


def test_roofline_and_transfer_time():
    model = machine()
    assert model.compute_seconds(0, 200.0, 50.0) == pytest.approx(2.0)  # flops bound
    assert model.transfer_seconds(0, 300) == pytest.approx(3.5)
    assert model.find_link(1, 0) == 0 and model.find_link(0, 1) is None


def test_bad_input_names_the_task():
    with pytest.raises(tt.ScheduleError, match="task 7 depends on unknown task 9"):
        _core.simulate(machine(), [_core.SimTask(id=7, deps=[9])])
