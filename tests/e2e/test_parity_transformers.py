"""Parity with eager on real architectures built from transformers configs (random weights)."""

from __future__ import annotations

import pytest
import torch

from conftest import assert_parity
from tiny_transformers import bert, resnet, vit

transformers = pytest.importorskip("transformers")


def example_inputs(name: str) -> tuple[tuple, dict | None]:
    """(args, kwargs) of a small call for a model of this module built by `name`."""
    if name in ("vit", "resnet"):
        return (torch.randn(2, 3, 32, 32),), None
    return (torch.randint(0, 128, (2, 12)),), ({"use_cache": False} if name == "gpt2" else None)


def gpt2():
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(config).eval()


def llama():
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=64,
        use_cache=False,
    )
    return transformers.LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("build", [gpt2, bert, llama], ids=["gpt2", "bert", "llama"])
def test_language_model_parity(build):
    torch.manual_seed(0)
    model = build()
    ids = torch.randint(0, 128, (2, 12))
    compiled = assert_parity(model, (ids,), {"use_cache": False} if build is gpt2 else None)
    # One region per decoder/encoder layer at least: the layers are the partition's unit.
    layers = model.config.num_hidden_layers
    assert compiled.region_count >= layers + 1
    assert not compiled.uses_direct_path


def test_bert_with_attention_mask():
    torch.manual_seed(0)
    model = bert()
    ids = torch.randint(0, 128, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 6:] = 0
    assert_parity(model, (ids,), {"attention_mask": mask})


@pytest.mark.parametrize("build", [vit, resnet], ids=["vit", "resnet"])
def test_vision_model_parity(build):
    torch.manual_seed(0)
    model = build()
    pixels = torch.randn(2, 3, 32, 32)
    compiled = assert_parity(model, (pixels,))
    assert compiled.region_count >= 3
