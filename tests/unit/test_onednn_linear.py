"""Matrix products on oneDNN (hardware/matmul_kernels.py, runtime/onednn_linear.py): which
products are taken, the rewrite, its op, the measurement, that only measured wins are
rewritten, and real models end to end."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tensortorrent as tt
from conftest import eager_outputs
from tensortorrent.hardware import matmul_kernels
from tensortorrent.hardware.matmul_kernels import LINEAR, Product
from tensortorrent.hardware.packed_kernels import PackedTiming
from tensortorrent.runtime import onednn_linear
from tensortorrent.runtime.onednn_linear import on_onednn, product

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
aten = torch.ops.aten


class Products(nn.Module):
    """One of each product the rewrite takes: linear (3-D input), addmm and mm."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 24)
        self.stored = nn.Parameter(torch.randn(24, 8))  # (in, out), as GPT-2's Conv1D keeps it
        self.bias = nn.Parameter(torch.randn(8))
        self.plain = nn.Parameter(torch.randn(8, 4))

    def forward(self, x):
        y = self.linear(x).flatten(0, 1)
        y = torch.addmm(self.bias, y, self.stored)
        return torch.mm(y, self.plain)


def graph_of(model: nn.Module, *args) -> torch.fx.GraphModule:
    """The model's aten graph as regions hold it: weights are inputs (placeholders with shapes)."""
    exported = torch.export.export(model, args)
    module = exported.graph_module
    weights = [exported.state_dict[name] for name in exported.graph_signature.parameters]
    module.weights = weights  # what call() passes before the inputs
    return module


def call(module: torch.fx.GraphModule, weights: list, *args):
    return module(*weights, *args)


@pytest.fixture
def onednn_always_faster(monkeypatch):
    """Every product faster on oneDNN, none on a packed weight (tests/unit/test_packed_weights.py)."""
    monkeypatch.setattr(onednn_linear, "faster_on_onednn", lambda p: True)
    monkeypatch.setattr(matmul_kernels, "packed_timing", lambda p: PackedTiming(1.0, None))


def targets(module: torch.fx.GraphModule) -> list:
    return [node.target for node in module.graph.nodes if node.op == "call_function"]


def test_products_of_linear_addmm_and_mm_are_recognised_with_their_sizes():
    x = torch.randn(2, 3, 16)
    module = graph_of(Products().eval(), x)
    found = [p for node in module.graph.nodes if (p := product(node)) is not None]
    assert [(p.rows, p.inner, p.outer, p.bias, p.transposed) for p in found] == [
        (6, 16, 24, True, False),
        (6, 24, 8, True, True),
        (6, 8, 4, False, True),
    ]


def test_what_onednn_cannot_take_stays_on_aten():
    class Others(nn.Module):
        def forward(self, a, b, full_bias):
            return torch.addmm(full_bias, a, b), torch.mm(a.double(), b.double()), torch.mm(a.int(), b.int())

    module = graph_of(Others(), torch.randn(3, 4), torch.randn(4, 5), torch.randn(3, 5))
    assert [product(node) for node in module.graph.nodes if product(node) is not None] == []


def test_the_rewritten_graph_computes_what_the_original_did(onednn_always_faster):
    model, x = Products().eval(), torch.randn(2, 3, 16)
    module = graph_of(model, x)
    rewritten, count = on_onednn(module)
    assert count == 3 and rewritten is not module
    assert targets(rewritten).count(LINEAR) == 3 and LINEAR not in targets(module)
    (got,) = call(rewritten, module.weights, x)
    torch.testing.assert_close(got, eager_outputs(model, (x,)), atol=1e-5, rtol=1e-4)


def test_only_products_measured_faster_are_rewritten(monkeypatch):
    monkeypatch.setattr(onednn_linear, "faster_on_onednn", lambda p: p.transposed and p.bias)
    module = graph_of(Products().eval(), torch.randn(2, 3, 16))
    rewritten, count = on_onednn(module)
    assert count == 1 and aten.addmm.default not in targets(rewritten)
    monkeypatch.setattr(onednn_linear, "faster_on_onednn", lambda p: False)
    assert on_onednn(module) == (module, 0)


def test_oneDNN_switched_off_in_torch_keeps_every_product_on_aten(onednn_always_faster):
    module = graph_of(Products().eval(), torch.randn(2, 3, 16))
    with torch.backends.mkldnn.flags(enabled=False):
        assert on_onednn(module) == (module, 0)


def test_the_op_takes_strided_inputs_and_transposed_weights():
    x = torch.randn(5, 7).t()  # (7, 5), not contiguous
    stored = torch.randn(5, 3)
    bias = torch.randn(3)
    torch.testing.assert_close(LINEAR(x, stored.t(), bias), torch.addmm(bias, x, stored), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(LINEAR(x, stored.t(), None), x @ stored, atol=1e-5, rtol=1e-4)


def test_measuring_a_product_times_both_kernels_and_remembers_the_answer(monkeypatch):
    calls = []

    def timed(aten_call, onednn_call):
        calls.append((aten_call(), onednn_call()))
        return 2.0, 1.0

    monkeypatch.setattr(matmul_kernels, "time_side_by_side", timed)
    matmul_kernels.product_seconds.cache_clear()
    p = Product(rows=3, inner=5, outer=7, dtype=torch.float32, bias=True, transposed=True)
    assert matmul_kernels.faster_on_onednn(p) and matmul_kernels.faster_on_onednn(p)
    assert matmul_kernels.fastest_flops_per_s(p) == p.flops / 1.0
    assert len(calls) == 1
    ((on_aten, on_onednn_value),) = calls
    torch.testing.assert_close(on_onednn_value, on_aten, atol=1e-5, rtol=1e-4)
    with torch.backends.mkldnn.flags(enabled=False):
        assert not matmul_kernels.faster_on_onednn(p)
        assert matmul_kernels.fastest_flops_per_s(p) == p.flops / 2.0
    matmul_kernels.product_seconds.cache_clear()


def test_a_product_is_timed_on_a_bounded_part_of_it(monkeypatch):
    shapes = []

    def timed(aten_call, onednn_call):
        shapes.append(tuple(aten_call().shape))
        return 1.0, 2.0

    monkeypatch.setattr(matmul_kernels, "time_side_by_side", timed)
    matmul_kernels.product_seconds.cache_clear()
    vocabulary = Product(rows=4096, inner=4096, outer=128256, dtype=torch.float32, bias=False, transposed=False)
    assert not matmul_kernels.faster_on_onednn(vocabulary)
    rows, outer = shapes[0]
    assert rows == matmul_kernels.TIMED_ROWS and outer * 4096 * 4 <= matmul_kernels.TIMED_WEIGHT_BYTES
    matmul_kernels.product_seconds.cache_clear()


def gpt2():
    pytest.importorskip("transformers")
    from tiny_transformers import built

    torch.manual_seed(0)
    return built("gpt2")


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_gpt2_regions_with_products_on_onednn_match_eager(onednn_always_faster, backend):
    model, ids = gpt2(), torch.randint(0, 128, (2, 12))
    compiled = tt.compile(model, (ids,), config=tt.CompileConfig(region_backend=backend), devices="cpu")
    choices = compiled.artifact_parts().region_backends.choices
    assert sum(choice.onednn_linears for choice in choices) == 9  # 4 per block, and the logits
    assert "9 matrix product(s) on oneDNN" in compiled.explain()
    torch.testing.assert_close(compiled(ids).logits, eager_outputs(model, (ids,)).logits, atol=1e-4, rtol=1e-3)


def test_the_training_program_keeps_aten_products_whose_gradients_autograd_knows(onednn_always_faster):
    """Its gradients against eager's: tests/e2e/test_training.py, with oneDNN where it wins."""
    model, ids = gpt2(), torch.randint(0, 128, (2, 12))
    compiled = tt.compile(model, (ids,), config=tt.CompileConfig(allow_training=True), devices="cpu")
    assert sum(c.onednn_linears for c in compiled.artifact_parts().region_backends.choices) == 9
    kernels = compiled._trainer._runner.kernels
    assert all(LINEAR not in targets(kernel.module) and kernel.forward == kernel.module.forward for kernel in kernels)
