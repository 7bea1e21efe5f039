"""Calls through the executor: cancellation, region errors, the watchdog, telemetry, threads."""

from __future__ import annotations

import json
import threading

import pytest
import torch

import tensortorrent as tt
from conftest import Hooks, ProbeChain, eager_outputs, probe, sleep_then

torch.manual_seed(0)

ONE_OP_REGIONS = tt.CompileConfig(max_region_nodes=1)


def compile_chain(config=ONE_OP_REGIONS, stages: int = 4):
    model = ProbeChain(stages)
    x = torch.randn(2, 8)
    compiled = tt.compile(model, example_inputs=(x,), config=config)
    Hooks.calls.clear()  # compile's profiling run called the probes
    return model, x, compiled


@pytest.mark.parametrize("config", [ONE_OP_REGIONS, None], ids=["executor", "direct"])
def test_cancel_with_no_call_running_cancels_no_later_call(hooks, config):
    model, x, compiled = compile_chain(config)
    compiled.request_cancel()
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))


def test_cancel_during_a_call_stops_before_the_next_region(hooks):
    model, x, compiled = compile_chain()
    hooks.on_probe = lambda tag: compiled.request_cancel() if tag == 1 else None
    with pytest.raises(tt.ExecutionCancelled):
        compiled(x)
    assert hooks.calls == [0, 1], "no probe after the cancelling one may run"
    hooks.on_probe = None
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))


class Boom(RuntimeError):
    pass


@pytest.mark.parametrize("config", [ONE_OP_REGIONS, None], ids=["executor", "direct"])
def test_exception_in_a_region_reaches_the_caller_unchanged(hooks, config):
    model, x, compiled = compile_chain(config)

    def fail(tag):
        if tag == 2:
            raise Boom("probe 2 exploded")

    hooks.on_probe = fail
    with pytest.raises(Boom, match="probe 2 exploded"):
        compiled(x)
    assert 3 not in hooks.calls
    hooks.on_probe = None
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)))


def test_stalled_region_trips_the_watchdog(hooks):
    config = tt.CompileConfig(max_region_nodes=1, stall_timeout_s=0.2)
    model, x, compiled = compile_chain(config)
    hooks.on_probe = sleep_then(1.5)
    with pytest.raises(tt.ExecutionStalled, match=r"0\.2"):
        compiled(x)


def test_last_report_and_trace(tmp_path):
    model, x, compiled = compile_chain()
    with pytest.raises(tt.TensorTorrentError, match="no call has finished"):
        compiled.trace(tmp_path / "none.json")
    compiled(x)
    report = compiled.last_report
    computes = [r for r in report.records if r.kind == "compute"]
    assert len(computes) == compiled.region_count and all(r.ran for r in report.records)
    for before, after in zip(computes, computes[1:]):
        assert before.end_us <= after.start_us, "a chain runs in order"
    path = compiled.trace(tmp_path / "trace.json")
    events = json.loads(open(path).read())["traceEvents"]
    names = [e["name"] for e in events if e["ph"] == "X"]
    assert names == [r.label for r in report.records]
    assert list(tmp_path.iterdir()) == [tmp_path / "trace.json"], "no temporary file is left behind"


def test_direct_path_switches(monkeypatch):
    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    assert tt.compile(model, example_inputs=(x,)).uses_direct_path
    off = tt.compile(model, example_inputs=(x,), config=tt.CompileConfig(prefer_direct_path=False))
    assert not off.uses_direct_path and "prefer_direct_path=False" in off.explain()
    torch.testing.assert_close(off(x), eager_outputs(model, (x,)))
    monkeypatch.setenv("TT_DIRECT_PATH", "0")
    assert "TT_DIRECT_PATH=0" in tt.compile(model, example_inputs=(x,)).explain()
    monkeypatch.setenv("TT_DIRECT_PATH", "1")
    forced = tt.compile(model, example_inputs=(x,), config=tt.CompileConfig(prefer_direct_path=False))
    assert forced.uses_direct_path


def test_explain_lists_regions_schedule_and_decision():
    _, _, compiled = compile_chain()
    text = compiled.explain()
    for part in ("Regions", "Schedule", "Direct path: not taken", "r0", "cpu", "after 0"):
        assert part in text


@pytest.mark.parametrize("config", [ONE_OP_REGIONS, None], ids=["executor", "direct"])
def test_concurrent_calls_match_serial_calls(config):
    model, _, compiled = compile_chain(config, stages=6)
    inputs = [torch.randn(2, 8) for _ in range(50)]
    serial = [compiled(x) for x in inputs]
    results: dict[int, list] = {}
    errors = []

    def worker(thread: int):
        try:
            results[thread] = [compiled(x) for x in inputs]
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for thread in range(8):
        for got, expected in zip(results[thread], serial):
            assert torch.equal(got, expected)


class TwoProbedBranches(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.left = torch.nn.Linear(8, 8)
        self.right = torch.nn.Linear(8, 8)

    def forward(self, x):
        return probe(self.left(x), 0) + probe(self.right(x), 1)


def test_independent_regions_run_concurrently(hooks):
    model, x = TwoProbedBranches(), torch.randn(2, 8)
    config = tt.CompileConfig(max_region_nodes=2, max_concurrent_regions=2)
    compiled = tt.compile(model, example_inputs=(x,), config=config)
    expected = eager_outputs(model, (x,))
    hooks.calls.clear()
    # Each branch's probe waits for the other: the call completes only if both regions run at once.
    barrier = threading.Barrier(2, timeout=10)
    hooks.on_probe = lambda tag: barrier.wait()
    torch.testing.assert_close(compiled(x), expected)
    assert sorted(hooks.calls) == [0, 1]


def test_direct_path_runs_the_models_forward_in_eval_and_the_capture_in_training():
    calls = []

    class Counted(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.drop = torch.nn.Dropout(0.9)

        def forward(self, x):
            calls.append(1)
            return self.drop(self.lin(x))

    model, x = Counted().eval(), torch.randn(8, 4)
    compiled = tt.compile(model, example_inputs=(x,))
    calls.clear()
    expected = eager_outputs(model, (x,))
    torch.testing.assert_close(compiled(x), expected)
    assert len(calls) == 2, "eval mode: export-free, the model's own forward ran"
    model.train()
    torch.testing.assert_close(compiled(x), expected)  # still eval semantics: dropout off
    assert len(calls) == 2, "training mode: the captured region ran instead"
