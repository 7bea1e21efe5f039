"""The direct path on a device: a plan whose every region is resident on one accelerator
runs inline there, without the executor, and replays a captured graph after warm-up
where the backend records graphs. The device is a third party's in host memory
(tests/plugins/good); the graph logic runs on a backend here that records a graph by
running the function again on each replay, writing into the captured outputs."""

from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree
from e2e.test_virtual_devices import BATCH, LAYER_BYTES, WIDTH, Stack
from unit.test_call_handles import RunningCount

import tensortorrent as tt
from conftest import assert_parity, eager_outputs
from tensortorrent.backends.host_memory import HostMemoryBackend
from tensortorrent.backends.interface import CapturedGraph, DeviceInfo
from tensortorrent.runtime.device_direct import WARM_UP_CALLS, DeviceDirect


@pytest.fixture
def example_device(plugins_from):
    plugins_from("good")
    return "example:0"


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Stack(layers=4).eval()


def test_a_model_resident_on_a_device_runs_there_without_the_executor(example_device, model):
    x = torch.randn(BATCH, WIDTH)
    compiled = assert_parity(model, (x,), devices=[example_device])
    assert compiled.uses_direct_path and compiled._plane is None
    assert compiled.region_devices == [example_device] * 4 and all(compiled._plan.placement.chosen.resident)
    for _ in range(WARM_UP_CALLS + 2):
        x = torch.randn(BATCH, WIDTH)
        got = compiled(x)
        assert got.device.type == "cpu"
        torch.testing.assert_close(got, eager_outputs(model, (x,)))
    report = compiled.last_report
    assert [r.kind for r in report.records] == ["compute"] * 4 and compiled.last_peak_bytes == {}
    text = compiled.explain()
    assert "Direct path: taken: every region resident on example:0" in text
    assert "graph: not captured: the example backend records no graphs" in text


def test_the_direct_path_on_a_device_can_be_declined_and_is_not_taken_when_weights_move(example_device, model):
    x = torch.randn(BATCH, WIDTH)
    declined = assert_parity(model, (x,), config=tt.CompileConfig(prefer_direct_path=False), devices=[example_device])
    assert not declined.uses_direct_path and declined._plane is not None
    assert "prefer_direct_path=False" in declined.explain()
    small = tt.CompileConfig(vram_budget_bytes=int(2.7 * LAYER_BYTES))
    streaming = assert_parity(model, (x,), config=small, devices=[example_device])
    assert not streaming.uses_direct_path and not all(streaming._plan.placement.chosen.resident)


def test_a_model_that_updates_its_buffers_stays_on_the_data_plane(example_device):
    counting = RunningCount()
    compiled = tt.compile(counting, (torch.zeros(4),), devices=[example_device])
    assert not compiled.uses_direct_path
    assert "not taken: the model updates its own buffers" in compiled.explain()
    first, second = compiled(torch.ones(4)), compiled(torch.ones(4))
    torch.testing.assert_close(second - first, torch.ones(4))


class RerunGraph(CapturedGraph):
    """A stand-in for a CUDA graph: replaying runs the function again into the same outputs."""

    def __init__(self, function) -> None:
        self.function, self.outputs, self.replays = function, function(), 0

    def replay(self) -> None:
        for kept, fresh in zip(pytree.tree_leaves(self.outputs), pytree.tree_leaves(self.function())):
            kept.copy_(fresh)
        self.replays += 1


class RecordingBackend(HostMemoryBackend):
    kind = "recording"

    def __init__(self, fails: bool = False) -> None:
        super().__init__([None])
        self.fails, self.graphs = fails, []

    def devices(self, live: bool = True) -> list[DeviceInfo]:
        return [DeviceInfo("recording:0", self.kind, "test", None, None)]

    def capture(self, index, function):
        if self.fails:
            raise RuntimeError("operation not permitted when stream is capturing\nmore")
        self.graphs.append(RerunGraph(function))
        return self.graphs[-1]


def runner_of(model):
    return tt.compile(model, (torch.randn(BATCH, WIDTH),), devices="cpu")._runner


def test_after_warm_up_a_captured_graph_is_replayed_with_each_calls_own_inputs(model):
    backend = RecordingBackend()
    direct = DeviceDirect(runner_of(model), backend, 0, "recording:0")
    inputs = [torch.randn(BATCH, WIDTH) for _ in range(WARM_UP_CALLS + 3)]
    outputs = [direct.run([x]) for x in inputs]
    (graph,) = backend.graphs
    assert graph.replays == 3
    for x, got in zip(inputs, outputs):  # no call's outputs were rewritten by a later replay
        torch.testing.assert_close(got, eager_outputs(model, (x,)))
    assert "graph: captured after 2 calls, replayed since" in direct.describe()


def test_a_graph_that_cannot_be_captured_leaves_the_calls_as_they_were(model):
    direct = DeviceDirect(runner_of(model), RecordingBackend(fails=True), 0, "recording:0")
    for _ in range(WARM_UP_CALLS + 2):
        x = torch.randn(BATCH, WIDTH)
        torch.testing.assert_close(direct.run([x]), eager_outputs(model, (x,)))
    assert "graph: not captured: RuntimeError: operation not permitted when stream is capturing" in direct.describe()
    assert "more" not in direct.describe()


class Scaled(torch.nn.Module):
    """Called with a constant keyword, as transformers models are (`use_cache=False`)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x, negate: bool = False):
        y = self.linear(x)
        return -y if negate else y


def test_a_constant_input_is_fixed_in_the_graph_and_the_tensors_are_refilled():
    torch.manual_seed(0)
    model = Scaled().eval()
    compiled = tt.compile(model, (torch.randn(BATCH, WIDTH),), devices="cpu", example_kwargs={"negate": True})
    backend = RecordingBackend()
    direct = DeviceDirect(compiled._runner, backend, 0, "recording:0")
    inputs = [torch.randn(BATCH, WIDTH) for _ in range(WARM_UP_CALLS + 2)]
    for x in inputs:
        got = direct.run(pytree.tree_leaves(((x,), {"negate": True})))
        torch.testing.assert_close(got, eager_outputs(model, (x,), {"negate": True}))
    assert backend.graphs[0].replays == 2
    assert "graph: captured after 2 calls, replayed since" in direct.describe()
