"""Per-call handles: submit, result, cancel, done and each call's own report; request_cancel
reaches only the calls running at that moment; calls that mutate buffers run one at a time."""

from __future__ import annotations

import gc
import threading
import time

import pytest
import torch
from torch import nn

import tensortorrent as tt
from conftest import ProbeChain, eager_outputs, wait_until

ONE_OP_REGIONS = tt.CompileConfig(max_region_nodes=1)


@pytest.fixture
def chain(hooks):
    torch.manual_seed(0)
    model = ProbeChain(stages=4)
    x = torch.randn(2, 8)
    compiled = tt.compile(model, example_inputs=(x,), config=ONE_OP_REGIONS)
    hooks.calls.clear()
    return model, x, compiled


def test_submit_returns_a_handle_with_the_result_and_its_own_report(chain):
    model, x, compiled = chain
    handle = compiled.submit(x)
    torch.testing.assert_close(handle.result(timeout=30), eager_outputs(model, (x,)))
    assert handle.done()
    computes = [r for r in handle.report.records if r.kind == "compute"]
    assert len(computes) == compiled.region_count and all(r.ran for r in handle.report.records)


def test_cancelling_one_handle_leaves_a_concurrent_call_alone(chain, hooks):
    model, x, compiled = chain
    gate, first_waiting = threading.Event(), threading.Event()

    def hold_the_first_call(tag):
        if tag == 0 and threading.current_thread().name.startswith("tensortorrent-call") and not gate.is_set():
            first_waiting.set()
            gate.wait(timeout=30)

    hooks.on_probe = hold_the_first_call
    first = compiled.submit(x)
    assert first_waiting.wait(timeout=30)
    first.cancel()
    with pytest.raises(TimeoutError, match="did not finish within 0.01 s; it goes on"):
        first.result(timeout=0.01)  # still held at the gate
    second = compiled(x)  # runs on this thread meanwhile, untouched by the cancel
    gate.set()
    with pytest.raises(tt.ExecutionCancelled):
        first.result(timeout=30)
    assert first.done() and first.report is None
    torch.testing.assert_close(second, eager_outputs(model, (x,)))


def test_request_cancel_stops_every_call_in_flight_and_no_later_one(chain, hooks):
    model, x, compiled = chain
    gate, waiting = threading.Event(), threading.Semaphore(0)

    def hold(tag):
        if tag == 0 and not gate.is_set():
            waiting.release()
            gate.wait(timeout=30)

    hooks.on_probe = hold
    handles = [compiled.submit(x) for _ in range(2)]
    for _ in handles:
        assert waiting.acquire(timeout=30)
    compiled.request_cancel()
    gate.set()
    for handle in handles:
        with pytest.raises(tt.ExecutionCancelled):
            handle.result(timeout=30)
    hooks.on_probe = None
    torch.testing.assert_close(compiled.submit(x).result(timeout=30), eager_outputs(model, (x,)))


class RunningCount(nn.Module):
    """Adds its input to a buffer on every call and returns the buffer: a mutation."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(4))

    def forward(self, x):
        self.total.add_(x)
        return self.total * 1.0


def test_calls_that_mutate_buffers_run_one_at_a_time():
    model = RunningCount()
    compiled = tt.compile(model, example_inputs=(torch.zeros(4),), config=ONE_OP_REGIONS)
    start = model.total.clone()
    handles = [compiled.submit(torch.ones(4)) for _ in range(16)]
    outputs = sorted(float(h.result(timeout=60)[0]) for h in handles)
    # Serialized: every call saw its own predecessor's total, none was lost.
    assert outputs == [float(start[0]) + k for k in range(1, 17)]
    torch.testing.assert_close(model.total, start + 16)


def stalling_tiered_chain(hooks):
    """A chain on a virtual device whose second probe outlives the watchdog; returns the
    compiled module, its input and an event set once that probe returns."""
    torch.manual_seed(0)
    chain = ProbeChain(stages=4, width=64).eval()
    layer = (64 * 64 + 64) * 4
    device = tt.VirtualDevice("quick", memory_bytes=int(2.5 * layer), flops=1e12, link_bandwidth=1e10)
    x = torch.randn(2, 64)
    config = tt.CompileConfig(max_region_nodes=1, stall_timeout_s=0.2)
    compiled = tt.compile(chain, (x,), config=config, devices=["quick"], machine=device)
    returned = threading.Event()

    def stuck(tag):
        if tag == 1:
            time.sleep(1.0)
            returned.set()

    hooks.on_probe = stuck
    return chain, compiled, x, returned


def test_after_a_stall_a_tiered_call_keeps_its_memory_until_its_stuck_region_returns(hooks):
    chain, compiled, x, returned = stalling_tiered_chain(hooks)
    plane, residents = compiled._plane.plane, list(compiled._plane.plan.program.memory_plan.resident_bytes)
    with pytest.raises(tt.ExecutionStalled):
        compiled(x)
    held = [plane.held(tier) for tier in range(len(residents))]
    if not returned.is_set():  # it still runs: no later call may be admitted into its memory
        assert held != residents
    assert returned.wait(timeout=30)
    assert wait_until(lambda: [plane.held(tier) for tier in range(len(residents))] == residents)
    hooks.on_probe = None
    torch.testing.assert_close(compiled(x), eager_outputs(chain, (x,)))


def test_a_module_dropped_while_its_stuck_region_runs_is_released_safely(hooks):
    _, compiled, x, returned = stalling_tiered_chain(hooks)
    with pytest.raises(tt.ExecutionStalled):
        compiled(x)
    del compiled  # the stuck region's thread now holds the last reference to the call
    gc.collect()
    assert returned.wait(timeout=30)
    time.sleep(0.2)  # the thread lets go of the run; Python releases what it held
    gc.collect()
    hooks.on_probe = None
    torch.manual_seed(0)
    model = ProbeChain(stages=2).eval()
    y = torch.randn(2, 8)
    torch.testing.assert_close(tt.compile(model, (y,), config=ONE_OP_REGIONS)(y), eager_outputs(model, (y,)))
