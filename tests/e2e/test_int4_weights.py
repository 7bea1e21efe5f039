"""CompileConfig(weight_format="int4") (issue 44): linear layers held, streamed and computed
as packed int4 with a scale per group of inputs; shapes int4 cannot hold stay int8."""

from __future__ import annotations

import pytest
import torch
import transformers
from e2e.test_generation import PROMPTS, STOP, hugging_face, left_padded
from torch import nn

import tensortorrent as tt
from tensortorrent.compression import Int4Linear, Int8Linear, compressed_model
from tensortorrent.compression.int4_linear import (
    ROW_BLOCKS,
    dequantized,
    kernel_rows_per_block,
    pack,
    quantize_int4,
    unpack,
)
from tensortorrent.planning.fit import weight_bytes
from tiny_transformers import DECODER, VOCAB, built, logits, meta_model, saved_model

INT4 = tt.CompileConfig(weight_format="int4", group_size=32)  # the tiny models' layers have 64 inputs


@pytest.mark.parametrize("rows_per_block", ROW_BLOCKS)
def test_the_packed_layouts_round_trip(rows_per_block):
    nibbles = torch.randint(0, 16, (128, 96), dtype=torch.int32)
    assert torch.equal(unpack(pack(nibbles, rows_per_block), rows_per_block), nibbles)
    weight = torch.randn(64, 256)
    values, scale = quantize_int4(weight, 128, rows_per_block)
    assert values.shape == (64, 128) and values.dtype == torch.uint8 and scale.shape == (64, 2)
    restored = (unpack(values, rows_per_block) - 8).float().reshape(64, 2, 128) * scale[..., None]
    assert (restored.reshape(64, 256) - weight).abs().max() <= scale.max() / 2 + 1e-6  # within half a step


def test_a_layout_written_on_another_cpu_computes_the_same_product():
    # This CPU's kernel reads one of the known layouts (AVX-512: blocks of 64 rows, AVX2: 32).
    assert kernel_rows_per_block() in ROW_BLOCKS
    torch.manual_seed(0)
    weight, bias, x = torch.randn(128, 256), torch.randn(128), torch.randn(5, 256)
    products = [Int4Linear.of(weight, bias, 64, block)(x) for block in ROW_BLOCKS]
    torch.testing.assert_close(products[0], products[1], rtol=0, atol=1e-5)
    layer = Int4Linear.of(weight, bias, 64)
    float_weight = dequantized(layer.weight, layer.weight_scale, 64, layer.rows_per_block, torch.float32)
    want = nn.functional.linear(x, float_weight, bias)
    # The CPU kernel computes in bfloat16: within 1% of the outputs' range.
    torch.testing.assert_close(products[0], want, rtol=0, atol=0.01 * want.abs().max().item())


def test_int4_greedy_generation_equals_the_int4_model_run_eagerly():
    torch.manual_seed(0)
    model = built("llama")
    generative = tt.compile_for_generation(
        model, max_length=24, batch_size=3, prompt_buckets=[2, 4], devices="cpu", config=INT4
    )
    ids, mask = left_padded(PROMPTS)
    ours = generative.generate(ids, mask, max_new_tokens=10, eos_token_id=STOP, pad_token_id=0)
    generative.close()
    eager = compressed_model(model, "int4", group_size=32)
    torch.testing.assert_close(ours, hugging_face(eager, ids, mask, max_new_tokens=10), rtol=0, atol=0)


def test_under_a_ram_budget_a_call_reads_the_int4_bytes(tmp_path):
    torch.manual_seed(0)
    wide = transformers.LlamaConfig(**{**DECODER, "hidden_size": 256, "intermediate_size": 512})
    model = transformers.LlamaForCausalLM(wide).eval()
    ids = torch.randint(0, VOCAB, (2, 16))
    held = weight_bytes(compressed_model(model, "int4"))
    config = tt.CompileConfig(weight_format="int4", ram_budget_bytes=held * 3 // 4, spill_dir=str(tmp_path))
    compiled = tt.compile(model, (ids,), config, devices="cpu")
    got = logits(compiled(ids))
    layers = [m for m in compiled.model.modules() if isinstance(m, (Int4Linear, Int8Linear))]
    assert all(isinstance(m, Int4Linear) for m in layers)  # every shape fits groups of 128 and blocks of 64
    compressed = sum(m.weight.nbytes + m.weight_scale.nbytes for m in layers)
    full = sum(m.out_features * m.in_features * 4 for m in layers)
    assert compressed <= 0.15 * full
    assert 0 < compiled.last_report.bytes_read <= compressed + (weight_bytes(model) - full)
    in_ram = tt.compile(model, (ids,), tt.CompileConfig(weight_format="int4"), devices="cpu")
    torch.testing.assert_close(got, logits(in_ram(ids)), rtol=1e-4, atol=1e-4)


def test_an_int4_checkpoint_round_trips_and_its_group_size_is_checked(tmp_path):
    model = saved_model("qwen3", tmp_path / "float", sharded=False)
    folder = tt.quantize_checkpoint(tmp_path / "float", tmp_path / "int4", "int4", group_size=32)
    ids = torch.randint(0, VOCAB, (2, 16))
    from_checkpoint = tt.compile(meta_model("qwen3"), (ids,), INT4, devices="cpu", checkpoint=folder)
    from_model = tt.compile(model, (ids,), INT4, devices="cpu")
    torch.testing.assert_close(logits(from_checkpoint(ids)), logits(from_model(ids)), rtol=1e-5, atol=1e-5)
    other = tt.CompileConfig(weight_format="int4", group_size=64)
    with pytest.raises(tt.CheckpointError, match="groups of 32: pass CompileConfig\\(group_size=32\\)"):
        tt.compile(meta_model("qwen3"), (ids,), other, devices="cpu", checkpoint=folder)
    with pytest.raises(tt.ConfigValueError, match="group_size: expected one of 32, 64, 128, 256, got 100"):
        tt.CompileConfig(weight_format="int4", group_size=100)


def test_an_int4_artifact_round_trips(tmp_path):
    torch.manual_seed(0)
    model = built("gpt2")
    ids = torch.randint(0, VOCAB, (2, 16))
    compiled = tt.compile(model, (ids,), INT4, devices="cpu")
    compiled.save(tmp_path / "a")
    loaded = tt.load_compiled(tmp_path / "a")
    torch.testing.assert_close(logits(loaded(ids)), logits(compiled(ids)), rtol=0, atol=0)
    assert "int4 in groups of 32" in loaded.explain()
