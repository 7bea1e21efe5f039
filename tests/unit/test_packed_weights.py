"""Convolutions and matrix products on weights packed once (hardware/conv_kernels.py,
hardware/matmul_kernels.py, runtime/packed_weights.py): which are taken, the room they may
use, a copy never stale, and whole plans: the packed bytes planned in RAM, simulated
peaks equal to measured ones, and nothing packed where the weights are not the same
tensors on every call."""

from __future__ import annotations

import copy
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
import torch
from e2e.test_peaks import simulated_peaks
from torch import nn

import tensortorrent as tt
from conftest import eager_outputs
from tensortorrent.hardware import conv_kernels, matmul_kernels
from tensortorrent.hardware.activations import GELU_TANH, RELU, SILU
from tensortorrent.hardware.conv_kernels import Convolution
from tensortorrent.hardware.matmul_kernels import Product
from tensortorrent.runtime import packed_weights
from tensortorrent.runtime.packed_weights import Packed, PackedKernel, with_packed_weights
from tensortorrent.runtime.region_backends import StrideMatched

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
TOLERANCE = dict(rtol=1e-4, atol=1e-5)


class ConvsAndProducts(nn.Module):
    """Three convolutions (with a bias, without, grouped with a stride), then a linear and
    a product on a weight stored (in, out), as GPT-2's Conv1D keeps it."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Conv2d(3, 16, 3, padding=1)
        self.second = nn.Conv2d(16, 16, 1, bias=False)
        self.third = nn.Conv2d(16, 32, 3, stride=2, padding=1, groups=4)
        self.linear = nn.Linear(32, 24)
        self.stored = nn.Parameter(torch.randn(24, 8))
        self.bias = nn.Parameter(torch.randn(8))

    def forward(self, x):
        y = self.third(torch.relu(self.second(torch.relu(self.first(x)))))
        y = self.linear(y.mean(dim=(2, 3)))
        return torch.addmm(self.bias, y, self.stored)


KERNELS = 5  # what ConvsAndProducts packs where every packed kernel is faster


def graph_and_weights(model: nn.Module, x: torch.Tensor):
    exported = torch.export.export(model, (x,))
    signature = exported.graph_signature
    weights = [exported.state_dict[name] for name in (*signature.parameters, *signature.buffers)]
    return exported.graph_module, weights


def example():
    torch.manual_seed(0)
    return ConvsAndProducts().eval(), torch.randn(2, 3, 16, 16)


def test_convolutions_and_products_on_the_models_weights_are_packed_and_match_aten(packed_always_faster):
    model, x = example()
    module, weights = graph_and_weights(model, x)
    rewritten, packed = with_packed_weights(module, dict(enumerate(weights)), room_bytes=1 << 30)
    assert packed.count == KERNELS
    assert packed.nbytes >= sum(w.numel() * 4 for w in weights if w.dim() > 1)
    assert sum(isinstance(m, PackedKernel) for m in rewritten.modules()) == KERNELS
    with torch.no_grad():
        torch.testing.assert_close(rewritten(*weights, x)[0], model(x), **TOLERANCE)


def test_only_weights_that_are_the_models_own_tensors_and_fit_the_room_are_packed(packed_always_faster):
    model, x = example()
    module, weights = graph_and_weights(model, x)
    assert with_packed_weights(module, {}, room_bytes=1 << 30)[1].count == 0, "activations are not packed"
    every = with_packed_weights(module, dict(enumerate(weights)), room_bytes=1 << 30)[1]
    assert with_packed_weights(module, dict(enumerate(weights)), room_bytes=0) == (module, Packed(0, 0))
    some = with_packed_weights(module, dict(enumerate(weights)), room_bytes=every.nbytes - 1)[1]
    assert 0 < some.count < KERNELS and some.nbytes < every.nbytes


@pytest.mark.parametrize(
    "kernel",
    [
        Convolution((1, 4, 8, 8), (8, 4, 3, 3), True, (1, 1), (1, 1), (1, 1), 1, torch.float32),
        Product(6, 4, 8, torch.float32, True, False),
        Product(6, 4, 8, torch.float32, True, True),
    ],
    ids=["conv2d", "linear", "addmm"],
)
def test_a_weight_changed_in_place_or_replaced_is_packed_again(kernel):
    torch.manual_seed(0)
    if isinstance(kernel, Convolution):
        x, weight, bias = torch.randn(kernel.input), torch.randn(kernel.weight), torch.randn(kernel.weight[0])

        def expected(w):
            return kernel.on_aten(x, w, bias)
    else:
        x, bias = torch.randn(kernel.rows, kernel.inner), torch.randn(kernel.outer)
        weight = (
            torch.randn(kernel.inner, kernel.outer) if kernel.transposed else torch.randn(kernel.outer, kernel.inner)
        )

        def expected(w):
            return torch.nn.functional.linear(x, w.t() if kernel.transposed else w, bias)

    packed = PackedKernel(kernel, [weight])  # its bias is added per call
    torch.testing.assert_close(packed(x, bias, weight), expected(weight), **TOLERANCE)
    weight.mul_(2.0)  # as an optimizer step would
    torch.testing.assert_close(packed(x, bias, weight), expected(weight), **TOLERANCE)
    other = torch.randn_like(weight)
    torch.testing.assert_close(packed(x, bias, other), expected(other), **TOLERANCE)


class NormalizedConvolutions(nn.Module):
    """Convolutions each read by a batch norm alone: then a relu; then a residual sum and a
    relu; two summed (a residual block's main branch and its shortcut), the first after a
    convolution with a bias and a norm without affine; and one whose output a second
    reader needs unnormalized."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.first_norm = nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.second, self.second_norm = nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.third, self.third_norm = nn.Conv2d(16, 16, 1), nn.BatchNorm2d(16, affine=False)
        self.shortcut, self.shortcut_norm = nn.Conv2d(16, 16, 1, bias=False), nn.BatchNorm2d(16)
        self.fourth, self.fourth_norm = nn.Conv2d(16, 16, 1), nn.BatchNorm2d(16)
        for module in self.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.normal_()
                module.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        y = torch.relu(self.first_norm(self.first(x)))
        y = torch.relu(self.second_norm(self.second(y)) + y)
        y = torch.relu(self.third_norm(self.third(y)) + self.shortcut_norm(self.shortcut(y)))
        z = self.fourth(y)
        return self.fourth_norm(z) + z


def test_a_batch_norm_residual_sum_and_relu_after_a_convolution_are_folded_into_it_and_follow_changes(
    packed_always_faster,
):
    torch.manual_seed(0)
    model, x = NormalizedConvolutions().eval(), torch.randn(2, 3, 12, 12)
    module, weights = graph_and_weights(model, x)
    rewritten, packed = with_packed_weights(module, dict(enumerate(weights)), room_bytes=1 << 30)
    assert (packed.count, packed.fused) == (5, 4)
    targets = [n.target for n in rewritten.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.aten.batch_norm.default) == 1  # the fourth's
    assert torch.ops.aten.relu.default not in targets
    kernels = [m.kernel for m in rewritten.modules() if isinstance(m, PackedKernel)]
    assert [getattr(k, "activation", "plain") for k in kernels] == [RELU, RELU, RELU, None, "plain"]
    assert [getattr(k, "residual", "plain") for k in kernels] == [False, True, True, False, "plain"]
    torch.testing.assert_close(rewritten(*weights, x)[0], eager_outputs(model, (x,)), **TOLERANCE)
    compiled = tt.compile(model, (x,), devices="cpu")
    assert sum(c.packed_kernels for c in compiled._backends.choices) == 5
    assert "4 of them with a batch norm folded in or an activation as post-op" in compiled.explain()
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)), **TOLERANCE)
    with torch.no_grad():  # as load_state_dict would: every copy made of them is made again
        model.first_norm.running_var.mul_(2.0)
        model.third.bias.add_(1.0)
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)), **TOLERANCE)


def test_a_cpu_plan_plans_its_packed_weights_in_ram_and_its_peaks_equal_the_simulation(packed_always_faster):
    model, x = example()
    compiled = tt.compile(model, (x,), config=tt.CompileConfig(max_region_nodes=2), devices="cpu")
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)), **TOLERANCE)
    held = sum(c.held_bytes for c in compiled._backends.choices)
    assert held > 0
    program = compiled._plane.plan.program
    planned = [b for b in program.buffers if b.label.endswith("packed weights")]
    assert sum(b.bytes for b in planned) == held
    assert list(compiled.last_peak_bytes.values()) == simulated_peaks(compiled)
    assert f"{KERNELS} convolution(s) and product(s) on weights packed once" in compiled.explain()


def test_nothing_is_packed_where_weights_stream_or_for_training(packed_always_faster, tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.ReLU()) for _ in range(6))).eval()
    x = torch.randn(1, 64, 8, 8)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    config = tt.CompileConfig(ram_budget_bytes=weights // 2, spill_dir=str(tmp_path))
    streamed = tt.compile(copy.deepcopy(model), (x,), config=config)
    assert streamed._streams
    assert not any(c.packed_kernels for c in streamed._backends.choices)
    trained = tt.compile(model, (x,), config=tt.CompileConfig(allow_training=True), devices="cpu")
    assert not any(c.packed_kernels for c in trained._trainer._backends.choices)


def test_a_loaded_artifact_packs_weights_read_whole_and_none_it_streams(packed_always_faster, tmp_path):
    model, x = example()
    compiled = tt.compile(model, (x,), config=tt.CompileConfig(max_region_nodes=2), devices="cpu")
    compiled.save(tmp_path / "artifact")
    expected = eager_outputs(model, (x,))
    for config in (None, tt.CompileConfig(max_region_nodes=2)):  # the saved plan replayed, then re-planned
        loaded = tt.load_compiled(tmp_path / "artifact", config=config)
        torch.testing.assert_close(loaded(x), expected, **TOLERANCE)
        assert sum(c.packed_kernels for c in loaded._backends.choices) == KERNELS
        assert list(loaded.last_peak_bytes.values()) == simulated_peaks(loaded)
    streamed = tt.load_compiled(tmp_path / "artifact", config=tt.CompileConfig(ram_budget_bytes=64 << 20))
    torch.testing.assert_close(streamed(x), expected, **TOLERANCE)
    assert not any(c.packed_kernels for c in streamed._backends.choices)


class ActivatedProducts(nn.Module):
    """GPT-2's MLP (Conv1D: addmm on a weight stored (in, out), a view, its GELU op by op)
    and Llama's (silu of the gate times the up projection)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.fc_bias = nn.Parameter(torch.randn(16, 32) / 4), nn.Parameter(torch.randn(32))
        self.gate, self.up, self.down = nn.Linear(32, 24, bias=False), nn.Linear(32, 24), nn.Linear(24, 16)

    def forward(self, x):
        h = torch.addmm(self.fc_bias, x.view(-1, 16), self.fc).view(*x.shape[:-1], 32)
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return self.down(nn.functional.silu(self.gate(h)) * self.up(h))


def test_the_activation_after_a_product_becomes_its_post_op(packed_always_faster):
    torch.manual_seed(0)
    model, x = ActivatedProducts().eval(), torch.randn(2, 5, 16)
    module, weights = graph_and_weights(model, x)
    rewritten, packed = with_packed_weights(module, dict(enumerate(weights)), room_bytes=1 << 30)
    kernels = [m.kernel for m in rewritten.modules() if isinstance(m, PackedKernel)]
    assert [getattr(k, "activation", None) for k in kernels] == [GELU_TANH, SILU, None, None]
    assert not any(n.target == torch.ops.aten.tanh.default for n in rewritten.graph.nodes)
    torch.testing.assert_close(rewritten(*weights, x)[0], eager_outputs(model, (x,)), **TOLERANCE)
    compiled = tt.compile(model, (x,), devices="cpu")
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)), **TOLERANCE)


@pytest.mark.parametrize("every_faster", [True, False])
def test_a_region_packs_every_kernel_where_that_graph_ran_it_faster_than_its_captured_graph(monkeypatch, every_faster):
    for kernels in (conv_kernels, matmul_kernels):  # each kernel slower packed, timed alone
        real = kernels.packed_timing
        monkeypatch.setattr(
            kernels, "packed_timing", lambda k, real=real: replace(real(k), unpacked_s=0.5, packed_s=1.0)
        )
    timed = []

    def side_by_side(captured, every):
        timed.append((captured(), every()))
        return (2.0, 1.0) if every_faster else (1.0, 2.0)

    monkeypatch.setattr(packed_weights, "time_side_by_side", side_by_side)
    model, x = example()
    module, weights = graph_and_weights(model, x)
    activations = lambda: [None] * len(weights) + [x]  # noqa: E731
    graph, packed = packed_weights.packed_region_graph(module, dict(enumerate(weights)), 1 << 30, activations)
    assert packed.count == (KERNELS if every_faster else 0) and (graph is module) != every_faster
    ((captured, every),) = timed  # both graphs ran on the model's weights and the activations given
    torch.testing.assert_close(captured[0], every[0], **TOLERANCE)


def test_regions_of_one_structure_are_timed_once_per_compile_and_each_packs_its_own_weights(
    monkeypatch, packed_always_faster
):
    # Two layers of the same shapes: the graph that won on the first is the second's too,
    # rewritten on the second's weights.
    timed = []
    monkeypatch.setattr(packed_weights, "time_side_by_side", lambda *graphs: timed.append(graphs) or (2.0, 1.0))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.ReLU()) for _ in range(3)]).eval()
    x = torch.randn(8, 64)
    compiled = tt.compile(model, (x,), tt.CompileConfig(max_region_nodes=3), devices="cpu")
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)), **TOLERANCE)
    packed = [choice.packed_kernels for choice in compiled.artifact_parts().region_backends.choices]
    assert len(packed) == 3 and packed == [1, 1, 1]
    assert len(timed) == 1


@pytest.mark.parametrize(("packed_s", "kept"), [(0.99, False), (0.95, True)])
def test_a_packed_graph_must_beat_the_captured_one_by_the_margin(monkeypatch, packed_always_faster, packed_s, kept):
    """Each kernel faster packed alone; the region itself 1% or 5% faster packed: its
    copies cost RAM, so only a gain beyond the timing's noise keeps them."""
    monkeypatch.setattr(packed_weights, "time_side_by_side", lambda captured, packed: (1.0, packed_s))
    model, x = example()
    module, weights = graph_and_weights(model, x)
    activations = lambda: [None] * len(weights) + [x]  # noqa: E731
    graph, packed = packed_weights.packed_region_graph(module, dict(enumerate(weights)), 1 << 30, activations)
    assert (packed.count == KERNELS) == kept and (graph is module) != kept


def test_a_traceable_graph_calls_the_packed_op_by_what_each_kernel_computes(packed_always_faster):
    torch.manual_seed(0)
    model, x = NormalizedConvolutions().eval(), torch.randn(2, 3, 12, 12)
    module, weights = graph_and_weights(model, x)
    rewritten, _ = with_packed_weights(module, dict(enumerate(weights)), room_bytes=1 << 30)
    graph, kernels = packed_weights.traceable(rewritten)
    assert set(kernels) == {m for m in rewritten.modules() if isinstance(m, PackedKernel)}
    calls = [n for n in graph.graph.nodes if n.op == "call_function" and n.target == packed_weights.PACKED]
    assert not any(n.op == "call_module" for n in graph.graph.nodes)
    assert [n.args[1] for n in calls] == list(range(len(kernels)))
    # Named by what each computes, so inductor's cache never serves one kernel's code for another.
    assert [n.args[0].split(" -> ")[0] for n in calls] == [repr(k.kernel) for k in kernels]
    with packed_weights.running(kernels):
        torch.testing.assert_close(graph(*weights, x)[0], eager_outputs(model, (x,)), **TOLERANCE)


@pytest.mark.parametrize("model_class", [NormalizedConvolutions, ActivatedProducts])
def test_inductor_regions_compute_on_the_packed_weights_and_follow_changes(packed_always_faster, model_class):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 12, 12) if model_class is NormalizedConvolutions else torch.randn(2, 5, 16)
    # Two models of one architecture: inductor's cache gives the second the first's code,
    # which must call the second's own kernels.
    models = [model_class().eval(), model_class().eval()]
    config = tt.CompileConfig(region_backend="inductor", max_region_nodes=4)
    compiled = [tt.compile(model, (x,), config=config, devices="cpu") for model in models]
    for model, module in zip(models, compiled, strict=True):
        choices = module._backends.choices
        assert any(c.backend == "inductor" and c.packed_kernels for c in choices)
        assert sum(c.held_bytes for c in choices) == sum(c.packed_bytes for c in choices) > 0
        torch.testing.assert_close(module(x), eager_outputs(model, (x,)), **TOLERANCE)
    with torch.no_grad():  # the copies are made again, inductor's code computing from them
        for parameter in models[0].parameters():
            parameter.mul_(0.5)
    for model, module in zip(models, compiled, strict=True):
        torch.testing.assert_close(module(x), eager_outputs(model, (x,)), **TOLERANCE)


def test_inductor_regions_are_compiled_for_the_layout_their_inputs_arrive_in(packed_always_faster):
    """A packed convolution writes channels-last: the next region's code takes that layout
    as it comes instead of copying it back to export's on every call."""
    torch.manual_seed(0)
    model, x = NormalizedConvolutions().eval(), torch.randn(2, 3, 12, 12)
    compiled = tt.compile(model, (x,), config=tt.CompileConfig(region_backend="inductor", max_region_nodes=4))
    runner = compiled._runner
    assert compiled.region_count > 2
    checked = 0
    with torch.no_grad():
        for kernel, inputs in zip(runner.kernels, runner.region_inputs([x]), strict=True):
            compiled_for = {index: stride for index, _, stride in getattr(kernel.forward, "_layouts", [])}
            for index, value in enumerate(inputs):
                if index in compiled_for and value.dim() == 4 and not value.is_contiguous():
                    assert value.stride() == compiled_for[index]
                    checked += 1
    assert checked > 0  # some region reads a channels-last value
    torch.testing.assert_close(compiled(x), eager_outputs(model, (x,)), **TOLERANCE)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_outputs_keep_the_layout_eager_gives_them(packed_always_faster, backend):
    """A packed convolution writes channels-last; the caller gets eager's contiguous
    output, which `view` takes as it would eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()).eval()
    x = torch.randn(2, 3, 8, 8)
    config = tt.CompileConfig(region_backend=backend, max_region_nodes=2)
    compiled = tt.compile(model, (x,), config=config, devices="cpu")
    assert compiled.region_count > 1 and sum(c.packed_kernels for c in compiled._backends.choices) == 2
    out = compiled(x)
    assert out.is_contiguous()
    torch.testing.assert_close(out.view(2, -1), eager_outputs(model, (x,)).view(2, -1), **TOLERANCE)


def test_a_loaded_artifact_compiles_its_inductor_regions_on_packed_weights_again(packed_always_faster, tmp_path):
    torch.manual_seed(0)
    model, x = NormalizedConvolutions().eval(), torch.randn(2, 3, 12, 12)
    config = tt.CompileConfig(region_backend="inductor", max_region_nodes=4)
    tt.compile(model, (x,), config=config, devices="cpu").save(tmp_path / "artifact")
    loaded = tt.load_compiled(tmp_path / "artifact")  # the saved choices, under the default config
    assert any(c.backend == "inductor" and c.packed_kernels for c in loaded._backends.choices)
    torch.testing.assert_close(loaded(x), eager_outputs(model, (x,)), **TOLERANCE)


def test_threads_calling_inductor_regions_on_packed_weights_each_get_their_own_results(packed_always_faster):
    torch.manual_seed(0)
    model, inputs = NormalizedConvolutions().eval(), [torch.randn(2, 3, 12, 12) for _ in range(4)]
    config = tt.CompileConfig(region_backend="inductor", max_region_nodes=4)
    compiled = tt.compile(model, (inputs[0],), config=config, devices="cpu")
    with ThreadPoolExecutor(len(inputs)) as pool:
        results = list(pool.map(lambda x: [compiled(x) for _ in range(5)], inputs))
    for x, got in zip(inputs, results, strict=True):
        for output in got:
            torch.testing.assert_close(output, eager_outputs(model, (x,)), **TOLERANCE)


class ChannelsLastPassThrough(nn.Module):
    def forward(self, x):
        return x, torch.sigmoid(torch.relu(x * 2.0) + 1.0)


def test_outputs_no_region_on_packed_weights_made_keep_the_layout_they_were_made_in():
    """A channels-last input gives channels-last outputs, as in eager, and an output that
    is the input is the input itself."""
    model = ChannelsLastPassThrough().eval()
    x = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    compiled = tt.compile(model, (torch.randn(2, 3, 4, 5),), config=tt.CompileConfig(max_region_nodes=1))
    assert compiled.region_count > 1
    same, activated = compiled(x)
    expected = eager_outputs(model, (x,))
    assert same is x and activated.stride() == expected[1].stride()
    torch.testing.assert_close(activated, expected[1])


def test_strides_that_differ_only_along_dimensions_of_size_one_are_not_copied():
    """oneDNN writes a 1x1 output with strides (16, 1, 16, 16) where its fake has
    (16, 1, 1, 1): the same bytes, which the compiled code takes as they are."""
    seen = []
    example = torch.empty(2, 16, 1, 1)
    forward = StrideMatched(lambda value: seen.append(value) or value, lambda value: value, [example])
    arrived = torch.randn(2, 16).as_strided((2, 16, 1, 1), (16, 1, 16, 16))
    forward(arrived)
    assert seen[0] is arrived
    forward(torch.randn(2, 16, 1, 1).transpose(0, 1).contiguous().transpose(0, 1))  # another layout: copied
    assert seen[1].stride() == example.stride()
