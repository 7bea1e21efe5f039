"""Convolutions on weights packed once (hardware/conv_kernels.py, runtime/packed_convs.py):
which are taken, the room they may use, a copy never stale, and whole plans: the packed
bytes planned in RAM, simulated peaks equal to measured ones, and nothing packed where
the weights are not the same tensors on every call."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
from e2e.test_peaks import simulated_peaks
from torch import nn

import tensortorrent as tt
from conftest import eager_outputs
from tensortorrent.hardware import conv_kernels
from tensortorrent.runtime import packed_convs
from tensortorrent.runtime.packed_convs import PackedConvolution, with_packed_convs

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


class Convs(nn.Module):
    """Three convolutions: with a bias, without, and grouped with a stride."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Conv2d(3, 16, 3, padding=1)
        self.second = nn.Conv2d(16, 16, 1, bias=False)
        self.third = nn.Conv2d(16, 32, 3, stride=2, padding=1, groups=4)

    def forward(self, x):
        return self.third(torch.relu(self.second(torch.relu(self.first(x)))))


@pytest.fixture
def packed_always_faster(monkeypatch):
    """Every convolution timed faster packed, with the packed copy's real size."""
    real = conv_kernels.packed_timing

    def faster(c):
        timing = real(c)
        return replace(timing, aten_s=1.0, packed_s=0.5) if timing.packed_bytes else timing

    monkeypatch.setattr(packed_convs, "packed_timing", faster)


def graph_and_weights(model: nn.Module, x: torch.Tensor):
    exported = torch.export.export(model, (x,))
    weights = [exported.state_dict[name] for name in exported.graph_signature.parameters]
    return exported.graph_module, weights


def test_convolutions_on_the_models_weights_are_packed_and_match_aten(packed_always_faster):
    torch.manual_seed(0)
    model, x = Convs().eval(), torch.randn(2, 3, 16, 16)
    module, weights = graph_and_weights(model, x)
    rewritten, packed = with_packed_convs(module, set(range(len(weights))), room_bytes=1 << 30)
    assert packed.count == 3
    assert packed.nbytes >= sum(p.numel() * 4 for name, p in model.named_parameters() if "weight" in name)
    assert sum(isinstance(m, PackedConvolution) for m in rewritten.modules()) == 3
    with torch.no_grad():
        torch.testing.assert_close(rewritten(*weights, x)[0], model(x), rtol=1e-4, atol=1e-5)


def test_only_weights_that_are_the_models_own_tensors_and_fit_the_room_are_packed(packed_always_faster):
    torch.manual_seed(0)
    model, x = Convs().eval(), torch.randn(2, 3, 16, 16)
    module, weights = graph_and_weights(model, x)
    assert with_packed_convs(module, set(), room_bytes=1 << 30)[1].count == 0, "activations are not packed"
    first = with_packed_convs(module, set(range(len(weights))), room_bytes=1 << 30)[1]
    assert with_packed_convs(module, set(range(len(weights))), room_bytes=0) == (module, packed_convs.Packed(0, 0))
    room = first.nbytes - 1  # all but the last fits
    assert 0 < with_packed_convs(module, set(range(len(weights))), room_bytes=room)[1].count < 3


def test_a_weight_changed_in_place_or_replaced_is_packed_again():
    torch.manual_seed(0)
    conv = nn.Conv2d(4, 8, 3, padding=1)
    x = torch.randn(1, 4, 8, 8)
    c = conv_kernels.Convolution((1, 4, 8, 8), (8, 4, 3, 3), True, (1, 1), (1, 1), (1, 1), 1, torch.float32)
    packed = PackedConvolution(c)
    weight, bias = conv.weight.detach().clone(), conv.bias.detach()
    torch.testing.assert_close(packed(x, weight, bias), c.on_aten(x, weight, bias), rtol=1e-4, atol=1e-5)
    weight.mul_(2.0)  # as an optimizer step would
    torch.testing.assert_close(packed(x, weight, bias), c.on_aten(x, weight, bias), rtol=1e-4, atol=1e-5)
    other = torch.randn_like(weight)
    torch.testing.assert_close(packed(x, other, bias), c.on_aten(x, other, bias), rtol=1e-4, atol=1e-5)


def test_a_cpu_plan_plans_its_packed_weights_in_ram_and_its_peaks_equal_the_simulation(packed_always_faster):
    torch.manual_seed(0)
    model, x = Convs().eval(), torch.randn(2, 3, 16, 16)
    compiled = tt.compile(model, (x,), config=tt.CompileConfig(max_region_nodes=2), devices="cpu")
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)), rtol=1e-4, atol=1e-5)
    held = sum(c.held_bytes for c in compiled._backends.choices)
    assert held > 0
    program = compiled._plane.plan.program
    planned = [b for b in program.buffers if b.label.endswith("packed weights")]
    assert sum(b.bytes for b in planned) == held
    assert list(compiled.last_peak_bytes.values()) == simulated_peaks(compiled)
    assert "3 convolution(s) on weights packed once" in compiled.explain()


def test_nothing_is_packed_where_weights_stream_or_for_training(packed_always_faster, tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.ReLU()) for _ in range(6))).eval()
    x = torch.randn(1, 64, 8, 8)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    config = tt.CompileConfig(ram_budget_bytes=weights // 2, spill_dir=str(tmp_path))
    streamed = tt.compile(copy.deepcopy(model), (x,), config=config)
    assert streamed._streams
    assert not any(c.packed_convs for c in streamed._backends.choices)
    trained = tt.compile(model, (x,), config=tt.CompileConfig(allow_training=True), devices="cpu")
    assert not any(c.packed_convs for c in trained._trainer._backends.choices)
