"""The native placement search as seen from Python (paired with cpp/bindings/planner.cc)."""

from __future__ import annotations

import threading

import pytest

import tensortorrent as tt
from tensortorrent import _core

INF = float("inf")


def problem(capacity: int = 1000) -> _core.PlacementProblem:
    """A 4-region chain on a slow host (device 0) and a fast accelerator (device 1)."""
    regions = [
        _core.PlacementRegion(id=i, deps=[i - 1] if i else [], compute_s=[4.0, 1.0], param_bytes=400, output_bytes=10)
        for i in range(4)
    ]
    devices = [
        _core.PlacementDevice(name="cpu", capacity_bytes=10_000),
        _core.PlacementDevice(name="acc", capacity_bytes=capacity),
    ]
    return _core.PlacementProblem(regions, devices, [[0.0, 0.01], [0.01, 0.0]], [0.0, 0.005])


def test_search_matches_exhaustive_and_keeps_capacity():
    found = _core.search_placement(problem())
    best = _core.exhaustive_placement(problem())
    assert found.best_value == pytest.approx(best.best_value, rel=0.01)
    resident = [r for d, r, region in zip(found.best.device, found.best.resident, range(4)) if d == 1 and r]
    assert 400 * len(resident) <= 1000


def test_a_python_evaluator_decides_and_threads_do_not_change_the_plan():
    calls = []

    def all_on_host_is_best(devices, resident):
        calls.append(threading.get_ident())
        return float(sum(devices))  # every region moved to the accelerator costs one

    one = _core.search_placement(problem(), _core.SearchOptions(threads=1), evaluator=all_on_host_is_best)
    four = _core.search_placement(problem(), _core.SearchOptions(threads=4), evaluator=all_on_host_is_best)
    assert list(one.best.device) == [0, 0, 0, 0] and one.best == four.best
    assert calls


def test_a_region_that_runs_nowhere_is_named():
    regions = [_core.PlacementRegion(id=7, compute_s=[INF, INF])]
    devices = [_core.PlacementDevice(name="cpu", capacity_bytes=1), _core.PlacementDevice(name="acc", capacity_bytes=1)]
    bad = _core.PlacementProblem(regions, devices, [[0.0, 0.0], [0.0, 0.0]], [0.0, 0.0])
    with pytest.raises(tt.ScheduleError, match="7"):
        _core.search_placement(bad)
