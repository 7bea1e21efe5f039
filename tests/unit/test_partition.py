"""The partition: layer-sized, bounded, deterministic regions with backward dependencies."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tensortorrent as tt
from tensortorrent.capture import capture_model, normalize
from tensortorrent.partition import layer_paths, partition

transformers = pytest.importorskip("transformers")


def regions_of(model: nn.Module, args: tuple, max_region_nodes: int = 256, kwargs: dict | None = None):
    program = normalize(capture_model(model, args, kwargs or {}))
    return program, partition(program, layer_paths(model), max_region_nodes)


def mlp() -> nn.Module:
    return nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(64, 64), nn.ReLU())])


def gpt2(layers: int = 3) -> nn.Module:
    config = transformers.GPT2Config(
        n_layer=layers, n_embd=32, n_head=2, vocab_size=64, n_positions=32, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(config).eval()


def test_small_mlp_is_one_region():
    program, regions = regions_of(mlp(), (torch.randn(2, 64),))
    assert len(regions) == 1 and regions[0].nodes == program.compute_nodes
    assert regions[0].parameter_bytes == program.parameter_bytes


def test_transformer_layers_become_regions():
    model = gpt2(3)
    _, regions = regions_of(model, (torch.randint(0, 64, (1, 8)),), kwargs={"use_cache": False})
    layers = [r.layer for r in regions if r.layer is not None]
    assert layers == ["transformer.h.0", "transformer.h.1", "transformer.h.2"]
    weights_per_layer = {r.parameter_bytes for r in regions if r.layer is not None}
    assert len(weights_per_layer) == 1, "identical layers carry identical weights"


@pytest.mark.parametrize("limit", [1, 3, 7])
def test_regions_respect_max_region_nodes_and_cover_every_op_once(limit):
    program, regions = regions_of(mlp(), (torch.randn(2, 64),), max_region_nodes=limit)
    assert all(1 <= len(r.nodes) <= limit for r in regions)
    assert [n for r in regions for n in r.nodes] == program.compute_nodes


def test_dependencies_point_backwards():
    _, regions = regions_of(gpt2(2), (torch.randint(0, 64, (1, 8)),), 16, {"use_cache": False})
    for region in regions:
        assert all(dep < region.index for dep in region.deps)


def test_partition_is_deterministic():
    model = gpt2(2)
    ids = torch.randint(0, 64, (1, 8))
    first = [
        (r.name, [n.name for n in r.nodes], r.deps) for r in regions_of(model, (ids,), 20, {"use_cache": False})[1]
    ]
    second = [
        (r.name, [n.name for n in r.nodes], r.deps) for r in regions_of(model, (ids,), 20, {"use_cache": False})[1]
    ]
    assert first == second


def test_tied_weights_share_one_bound_tensor():
    program, _ = regions_of(gpt2(1), (torch.randint(0, 64, (1, 8)),), kwargs={"use_cache": False})
    tied = [b for b in program.bound if len(b.names) > 1]
    assert len(tied) == 1 and set(tied[0].names) == {"transformer.wte.weight", "lm_head.weight"}


def test_metadata_asserts_are_dropped_from_the_graph():
    program, _ = regions_of(gpt2(1), (torch.randint(0, 64, (1, 8)),), kwargs={"use_cache": False})
    assert not [n for n in program.compute_nodes if "assert_tensor_metadata" in str(n.target)]


def test_regions_say_what_they_hold():
    _, regions = regions_of(gpt2(1), (torch.randint(0, 64, (1, 8)),), kwargs={"use_cache": False})
    assert [r.span for r in regions if r.layer] == ["GPT2Block"]
    assert regions[0].span == "transformer .. transformer.drop"


class HeadsMerge(nn.Module):
    """Attention's last step: heads back into features, by a view valid for eager's strides."""

    def forward(self, y):
        return y.transpose(1, 2).view(y.shape[0], y.shape[2], -1)


def test_a_region_accepts_inputs_with_other_strides_than_eager_gave_them():
    from tensortorrent.partition import build_region_module

    heads = torch.randn(2, 5, 4, 3).transpose(1, 2)  # as attention leaves them: [batch, heads, seq, dim]
    model = HeadsMerge().eval()
    program = normalize(capture_model(model, (heads,), {}))
    (region,) = partition(program, frozenset(), 256)
    module = build_region_module(program.graph_module, region)
    # Copied between tiers, the value arrives contiguous, where the exported view cannot apply.
    (merged,) = module(heads.contiguous())
    torch.testing.assert_close(merged, model(heads))


class MaskedScale(nn.Module):
    """Makes a tensor of its own (export records it on the CPU) and reads a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x):
        return x * torch.arange(x.shape[-1], dtype=x.dtype) * self.scale


def test_a_region_retargeted_to_a_device_makes_its_tensors_there():
    from tensortorrent.partition import build_region_module
    from tensortorrent.partition.region_module import on_device

    model, x = MaskedScale().eval(), torch.randn(2, 5)
    program = normalize(capture_model(model, (x,), {}))
    (region,) = partition(program, frozenset(), 256)
    module = build_region_module(program.graph_module, region)
    assert on_device(module, torch.device("cpu")) is module
    values = {b.slot: b.tensor for b in program.bound} | {program.input_slots[0]: x}
    inputs = [values[program.slot_of[node]] for node in region.in_nodes]
    (out,) = on_device(module, torch.device("meta"))(*[t.to("meta") for t in inputs])
    assert out.device.type == "meta" and out.shape == (2, 5)
    (again,) = module(*inputs)  # the original is untouched
    torch.testing.assert_close(again, model(x))


class Cache(nn.Module):
    """Writes rows of a buffer, as a static KV cache does; `peek` reads its old value first."""

    def __init__(self, peek: bool) -> None:
        super().__init__()
        self.peek = peek
        self.register_buffer("cache", torch.zeros(8, 4))

    def forward(self, rows, values):
        before = self.cache * 2 if self.peek else 0
        self.cache.index_copy_(0, rows, values)
        return self.cache.sum(0) + before


@pytest.mark.parametrize("peek", [False, True])
def test_a_buffer_written_by_index_copy_is_written_in_place_unless_its_old_value_is_read(peek):
    rows, values = torch.tensor([1, 5]), torch.randn(2, 4)
    eager = Cache(peek)
    expected = eager(rows, values)
    model = Cache(peek)
    address = model.cache.data_ptr()
    compiled = tt.compile(model, (rows, values), devices="cpu")
    assert len(compiled._program.in_place) == (0 if peek else 1)
    torch.testing.assert_close(compiled(rows, values), expected)
    torch.testing.assert_close(model.cache, eager.cache, rtol=0, atol=0)
    assert model.cache.data_ptr() == address
