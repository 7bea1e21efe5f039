"""A region's kernels on accelerators (runtime/device_kernels.py), exercised here on the
CPU's device, which the same code serves: the CUDA run is in tests/device."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tensortorrent as tt
from tensortorrent.runtime import region_backends
from tensortorrent.runtime.device_kernels import DeviceKernels, describe_device_kernels
from tensortorrent.runtime.region_backends import EAGER, INDUCTOR, StrideMatched, example_inputs

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def region():
    """The first region of a small MLP: its captured graph, input nodes and input values."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 32), nn.Tanh()).eval()
    compiled = tt.compile(model, (torch.randn(4, 32),), config=tt.CompileConfig(max_region_nodes=2))
    kernel, in_nodes = compiled._runner.kernels[0], compiled._regions[0].in_nodes
    return kernel.module, in_nodes, example_inputs(in_nodes)


def test_under_eager_a_device_runs_the_captured_graph_and_explain_says_nothing(region):
    module, in_nodes, args = region
    kernels = DeviceKernels(module, in_nodes, EAGER, 0)
    forward = kernels.forward(CPU)
    assert kernels.choices == {"cpu": region_backends.RegionChoice(EAGER)}
    torch.testing.assert_close(forward(*args), module(*args))
    assert describe_device_kernels([kernels]) == []


def test_under_inductor_a_device_runs_inductors_code_made_once(region, monkeypatch):
    module, in_nodes, args = region
    calls = []
    compile_graph = region_backends.compile_graph
    monkeypatch.setattr(
        "tensortorrent.runtime.device_kernels.compile_graph", lambda *a: calls.append(a) or compile_graph(*a)
    )
    kernels = DeviceKernels(module, in_nodes, INDUCTOR, 3)
    forward = kernels.forward(CPU)
    assert kernels.forward(CPU) is forward and len(calls) == 1
    assert isinstance(forward, StrideMatched) and kernels.choices["cpu"].backend == INDUCTOR
    torch.testing.assert_close(forward(*args), module(*args), atol=1e-5, rtol=1e-4)
    (line,) = describe_device_kernels([kernels])[1:]
    assert line.startswith("  r0       on cpu: inductor, compiled in ")


@pytest.mark.parametrize(("times", "kept"), [((2.0, 1.0), INDUCTOR), ((1.0, 2.0), EAGER)])
def test_under_auto_a_device_keeps_what_ran_faster_there_waiting_for_its_queue(region, monkeypatch, times, kept):
    module, in_nodes, _ = region
    synced = []

    def timed(eager, compiled, sync):
        eager(), compiled()
        sync()
        synced.append(True)
        return times

    monkeypatch.setattr(region_backends, "time_side_by_side", timed)
    kernels = DeviceKernels(module, in_nodes, "auto", 0)
    forward = kernels.forward(CPU)
    choice = kernels.choices["cpu"]
    assert synced and (choice.backend, choice.eager_s, choice.inductor_s) == (kept, *times)
    assert isinstance(forward, StrideMatched) is (kept == INDUCTOR)
    (line,) = describe_device_kernels([kernels])[1:]
    assert f"on cpu: {kept}, compiled in " in line
    assert line.endswith(f"(eager {times[0] * 1e3:.3f} ms, inductor {times[1] * 1e3:.3f} ms)")


def test_a_region_inductor_cannot_compile_for_a_device_runs_its_graph_there(region, monkeypatch, caplog):
    module, in_nodes, args = region

    def refuse(module, inputs, options=None):
        raise RuntimeError("no code for this device")

    monkeypatch.setattr(torch._inductor, "compile", refuse)
    kernels = DeviceKernels(module, in_nodes, INDUCTOR, 5)
    forward = kernels.forward(CPU)
    assert kernels.choices["cpu"].backend == EAGER and not isinstance(forward, StrideMatched)
    torch.testing.assert_close(forward(*args), module(*args))
    assert "region 5 stays eager on cpu" in caplog.text
    assert "inductor failed: RuntimeError: no code for this device" in "\n".join(describe_device_kernels([kernels]))
