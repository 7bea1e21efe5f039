"""Parity with eager on real architectures built from transformers configs (random weights)."""

from __future__ import annotations

import pytest
import torch

from conftest import assert_parity
from tiny_transformers import bert, built, resnet, vit

transformers = pytest.importorskip("transformers")


def example_inputs(name: str) -> tuple[tuple, dict | None]:
    """(args, kwargs) of a small call for a model of this module built by `name`."""
    if name in ("vit", "resnet"):
        return (torch.randn(2, 3, 32, 32),), None
    return (torch.randint(0, 128, (2, 12)),), ({"use_cache": False} if name == "gpt2" else None)


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama"])
def test_language_model_parity(name):
    torch.manual_seed(0)
    model = bert() if name == "bert" else built(name)
    ids = torch.randint(0, 128, (2, 12))
    compiled = assert_parity(model, (ids,), {"use_cache": False} if name == "gpt2" else None)
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
