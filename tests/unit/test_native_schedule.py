"""The native schedule and executor as seen from Python."""

from __future__ import annotations

import json
import threading
import time

import pytest

import tensortorrent as tt
from tensortorrent import _core


def chain(n: int) -> _core.Schedule:
    return _core.Schedule(
        [_core.Instruction(id=i, region=i, label=f"r{i}", deps=[i - 1] if i else []) for i in range(n)]
    )


def test_schedule_rejects_cycles_unknown_and_duplicate_ids():
    with pytest.raises(tt.ScheduleError, match="cycle"):
        _core.Schedule([_core.Instruction(id=0, deps=[1]), _core.Instruction(id=1, deps=[0])])
    with pytest.raises(tt.ScheduleError, match="9"):
        _core.Schedule([_core.Instruction(id=0, deps=[9])])
    with pytest.raises(tt.ScheduleError, match="3"):
        _core.Schedule([_core.Instruction(id=3), _core.Instruction(id=3)])


def test_executor_runs_in_dependency_order():
    seen = []
    report = _core.Executor(workers=2).run(chain(50), seen.append)
    assert seen == list(range(50))
    assert [r.id for r in report.records] == list(range(50)) and all(r.ran for r in report.records)


def test_kernel_exception_keeps_type_and_message_and_stops_later_instructions():
    class Boom(Exception):
        pass

    seen = []

    def kernel(region):
        seen.append(region)
        if region == 2:
            raise Boom("region 2 failed")

    with pytest.raises(Boom, match="region 2 failed"):
        _core.Executor(workers=2).run(chain(6), kernel)
    assert seen == [0, 1, 2]


def test_cancel_token_is_consumed_by_one_run():
    executor, token = _core.Executor(workers=1), _core.CancelToken()
    token.request()
    with pytest.raises(tt.ExecutionCancelled):
        executor.run(chain(3), lambda region: None, cancel=token)
    assert not token.pending
    executor.run(chain(3), lambda region: None, cancel=token)


def test_stall_watchdog_raises_and_names_the_stuck_instruction():
    release = threading.Event()

    def kernel(region):
        if region == 1:
            release.wait(10)

    executor = _core.Executor(workers=2)
    start = time.monotonic()
    with pytest.raises(tt.ExecutionStalled, match="r1"):
        executor.run(chain(3), kernel, stall_timeout_s=0.2, caller_runs=False)
    assert time.monotonic() - start < 8
    release.set()
    executor.run(chain(3), lambda region: None)  # still usable


def test_bad_options_are_rejected():
    with pytest.raises(tt.ScheduleError):
        _core.Executor(workers=0)
    with pytest.raises(tt.ScheduleError):
        _core.Executor(workers=1).run(chain(1), lambda r: None, stall_timeout_s=0)


def test_a_worker_keeps_its_python_thread_state_between_kernels():
    local = threading.local()
    counts = []

    def kernel(region):
        local.count = getattr(local, "count", 0) + 1
        counts.append(local.count)

    executor = _core.Executor(workers=1)
    executor.run(chain(100), kernel, caller_runs=False)
    executor.run(chain(100), kernel, caller_runs=False)
    assert counts == list(range(1, 201)), "threading.local values survive from one kernel to the next"


def test_the_caller_runs_a_chain_itself():
    threads = set()
    report = _core.Executor(workers=2).run(chain(20), lambda region: threads.add(threading.get_ident()))
    assert threads == {threading.get_ident()}
    assert {record.worker for record in report.records} == {0}


def test_loads_and_predictions_reach_the_kernel_records_and_trace():
    schedule = _core.Schedule(
        [
            _core.Instruction(
                id=10,
                kind=_core.InstructionKind.Load,
                device="cuda:0",
                label="load",
                predicted_start_us=0.0,
                predicted_end_us=5.0,
            ),
            _core.Instruction(id=11, region=0, label="r0", deps=[10]),
        ]
    )
    assert schedule.instructions[0].predicted_end_us == 5.0
    assert schedule.instructions[1].predicted_start_us == -1.0
    with pytest.raises(AttributeError):
        schedule.instructions[0].predicted_start_us = 1.0

    seen = []
    report = _core.Executor(workers=1).run(schedule, seen.append)
    assert seen == [10, 11], "the kernel gets the instruction id, not the region"
    load, compute = report.records
    assert (load.kind, load.predicted_start_us, load.predicted_end_us) == ("load", 0.0, 5.0)
    assert (compute.kind, compute.predicted_start_us, compute.predicted_end_us) == ("compute", -1.0, -1.0)

    events = {e["name"]: e for e in json.loads(report.chrome_trace_json())["traceEvents"] if e["ph"] == "X"}
    assert events["load"]["cat"] == "load"
    assert events["load"]["args"] == {"id": 10, "device": "cuda:0", "predicted_start_us": 0, "predicted_end_us": 5}
    assert events["r0"]["args"] == {"id": 11, "device": "cpu"}


def test_records_take_predictions_as_keywords():
    record = _core.InstructionRecord(1, "a", "compute", "cpu", 0, 0.0, 1.0, True)
    assert (record.predicted_start_us, record.predicted_end_us) == (-1.0, -1.0)
    record = _core.InstructionRecord(
        1, "a", "compute", "cpu", 0, 0.0, 1.0, True, predicted_start_us=0.5, predicted_end_us=2.0
    )
    assert (record.predicted_start_us, record.predicted_end_us) == (0.5, 2.0)


@pytest.mark.parametrize(
    ("start", "end", "match"),
    [
        (float("nan"), 1.0, "must be finite"),
        (0.0, float("inf"), "must be finite"),
        (2.0, -1.0, "both be >= 0 or both negative"),
        (3.0, 2.0, "must not be before"),
    ],
)
def test_bad_predictions_are_rejected(start, end, match):
    with pytest.raises(tt.ScheduleError, match=f"instruction 3 .*{match}"):
        _core.Schedule([_core.Instruction(id=3, predicted_start_us=start, predicted_end_us=end)])
