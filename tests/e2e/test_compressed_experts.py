"""A mixture of experts' stacked experts in int8 (issue 44; compression/int8_experts.py):
computed on int8 tables and written to checkpoints and artifacts; gathered from disk under
a budget in tests/e2e/test_generation.py."""

from __future__ import annotations

import safetensors.torch
import torch
from e2e.test_compressed_weights import agreement
from e2e.test_generation import PROMPTS, STOP, hugging_face, left_padded

import tensortorrent as tt
from tensortorrent.compression import compressed_model
from tensortorrent.compression.int8_experts import Int8Experts, expert_rows, int8_grouped_linear, quantize_stacked
from tiny_transformers import VOCAB, built, logits, meta_model, needs_stacked_experts

INT8 = tt.CompileConfig(weight_format="int8")


def test_the_grouped_op_computes_each_rows_expert_and_only_experts_with_rows():
    torch.manual_seed(0)
    weight = torch.randn(4, 24, 40)
    values, scale = quantize_stacked(weight)
    assert values.dtype == torch.int8 and values.shape == (4, 24, 40) and scale.shape == (4, 24)
    rows = torch.randn(7, 40)
    offsets = torch.tensor([2, 2, 6, 6], dtype=torch.int32)  # experts 1 and 3 have no rows; row 6 none at all
    got = int8_grouped_linear(rows, values, scale, offsets)
    dequantized = values.float() * scale[..., None]
    low = rows.bfloat16().float()  # what the CPU kernel computes on; it rounds its output to bfloat16 too
    expected = torch.cat([low[0:2] @ dequantized[0].T, low[2:6] @ dequantized[2].T, torch.zeros(1, 24)])
    torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-2)
    # Stored [experts, in, out] (transposed), the same tables.
    again, again_scale = quantize_stacked(expert_rows(weight.transpose(1, 2).contiguous(), transposed=True))
    assert torch.equal(again, values) and torch.equal(again_scale, scale)


@needs_stacked_experts
def test_int8_experts_logits_stay_close_to_eager_float32():
    torch.manual_seed(0)
    model = built("qwen3_moe")
    ids = torch.randint(0, VOCAB, (8, 16))
    for weight_format in ("int8", "int4"):  # experts are int8 in either
        compiled = tt.compile(model, (ids,), tt.CompileConfig(weight_format=weight_format, group_size=32))
        experts = [m for m in compiled.model.modules() if isinstance(m, Int8Experts)]
        assert len(experts) == 2 and all(m.gate_up_proj.dtype == torch.int8 for m in experts)
        with torch.no_grad():
            cosine, top1 = agreement(logits(compiled(ids)), logits(model(ids)))
        assert cosine >= (0.999 if weight_format == "int8" else 0.99)
        assert weight_format == "int4" or top1 >= 0.95  # as for the dense models: nearly tied random logits
        assert "4 int8 stacked expert projections" in compiled.explain()  # 2 per layer
    # The model given keeps its float experts.
    assert all(p.dtype == torch.float32 for name, p in model.named_parameters() if ".experts." in name)


@needs_stacked_experts
def test_int8_experts_generate_the_int8_model_run_eagerly_token_for_token():
    torch.manual_seed(0)
    model = built("qwen3_moe")
    generative = tt.compile_for_generation(
        model, max_length=16, batch_size=3, prompt_buckets=[4], devices="cpu", config=INT8
    )
    ids, mask = left_padded(PROMPTS)
    ours = generative.generate(ids, mask, max_new_tokens=6, eos_token_id=STOP, pad_token_id=0)
    generative.close()
    eager = compressed_model(model, "int8")  # the same int8 tables and kernels, eagerly
    torch.testing.assert_close(ours, hugging_face(eager, ids, mask, max_new_tokens=6), rtol=0, atol=0)


@needs_stacked_experts
def test_a_checkpoint_of_stacked_experts_quantizes_and_compiles_as_the_model_does(tmp_path):
    torch.manual_seed(0)
    model = built("qwen3_moe")
    (tmp_path / "float").mkdir()
    safetensors.torch.save_file(model.state_dict(), tmp_path / "float" / "model.safetensors")  # experts stacked
    folder = tt.quantize_checkpoint(tmp_path / "float", tmp_path / "int8", model=meta_model("qwen3_moe"))
    stored = safetensors.torch.load_file(f"{folder}/model.safetensors")
    gate_up = stored["model.layers.0.mlp.experts.gate_up_proj"]
    assert gate_up.dtype == torch.int8 and stored["model.layers.0.mlp.experts.gate_up_proj_scale"].shape == (4, 64)
    ids = torch.randint(0, VOCAB, (2, 16))
    from_checkpoint = tt.compile(meta_model("qwen3_moe"), (ids,), INT8, devices="cpu", checkpoint=folder)
    from_model = tt.compile(model, (ids,), INT8, devices="cpu")
    torch.testing.assert_close(logits(from_checkpoint(ids)), logits(from_model(ids)), rtol=1e-5, atol=1e-5)
    from_model.save(tmp_path / "artifact")  # and an artifact holds the same int8 tables
    loaded = tt.load_compiled(tmp_path / "artifact")
    torch.testing.assert_close(logits(loaded(ids)), logits(from_model(ids)), rtol=1e-5, atol=1e-5)
    assert "4 int8 stacked expert projections" in loaded.explain()
