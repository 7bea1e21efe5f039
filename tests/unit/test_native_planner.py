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


def test_measures_of_a_placement():
    # cpu [0, 4]; 10 bytes reach acc at 4.1: [4.1, 5.1], then region 2 streams its 400 bytes
    # (2 s) [5.1, 8.1]; back to cpu at 8.2: [8.2, 12.2].
    devices, resident = [0, 1, 1, 0], [True, True, False, True]
    measures = _core.measure_placement(problem(), devices, resident)
    assert measures.latency_s == _core.evaluate_latency(problem(), devices, resident) == pytest.approx(12.2)
    assert measures.bottleneck_s == pytest.approx(8.1)  # cpu: 4 + 4 + 0.1 received; acc: 1 + 3 + 0.1
    assert measures.traffic_bytes == 10 + 400 + 10
    assert repr(measures).startswith("PlacementMeasures(latency_s=12.2, bottleneck_s=8.1, traffic_bytes=420")
    with pytest.raises(tt.ScheduleError, match="expected 4 devices"):
        _core.measure_placement(problem(), [0], [True])


def test_weights_change_the_choice():
    fastest = _core.search_placement(problem())
    assert 1 in fastest.best.device  # the accelerator is four times faster
    quiet = _core.ObjectiveWeights(latency=0.0, traffic_per_byte=1.0)
    assert repr(quiet) == "ObjectiveWeights(latency=0, bottleneck=0, traffic_per_byte=1)"
    found = _core.search_placement(problem(), _core.SearchOptions(weights=quiet))
    assert list(found.best.device) == [0, 0, 0, 0] and found.best_value == 0.0  # nothing moves
    assert _core.exhaustive_placement(problem(), weights=quiet).best == found.best

    options = _core.SearchOptions(threads=2)
    options.weights.latency, options.weights.bottleneck = 1.0, 1.0  # the field is the options' own
    assert options.weights == _core.ObjectiveWeights(latency=1.0, bottleneck=1.0)
    mixed = _core.search_placement(problem(), options)
    measures = _core.measure_placement(problem(), mixed.best.device, mixed.best.resident)
    assert mixed.best_value == pytest.approx(measures.latency_s + measures.bottleneck_s)
    assert "weights=ObjectiveWeights(latency=1, bottleneck=1" in repr(options)


def test_bad_weights_are_rejected_by_name():
    with pytest.raises(tt.ScheduleError, match="bottleneck must be finite and >= 0"):
        _core.search_placement(problem(), _core.SearchOptions(weights=_core.ObjectiveWeights(bottleneck=-1.0)))
    with pytest.raises(tt.ScheduleError, match="traffic_per_byte must be finite"):
        _core.exhaustive_placement(problem(), weights=_core.ObjectiveWeights(traffic_per_byte=INF))
    with pytest.raises(tt.ScheduleError, match="at least one"):
        _core.search_placement(problem(), _core.SearchOptions(weights=_core.ObjectiveWeights(latency=0.0)))
