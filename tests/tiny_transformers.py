"""Tiny Hugging Face models built from configs (random weights, nothing downloaded): GPT-2,
Llama, Qwen3 and Qwen3-MoE, saved as Hugging Face saves them, and their meta-device twins; BERT, ViT
and ResNet."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn

VOCAB = 128
# transformers 4 loops over a mixture's hit experts in Python (export cannot capture it)
# and keeps them one module each; 5 stacks them. `make test-transformers4` runs the rest on 4.
TRANSFORMERS_5 = int(transformers.__version__.split(".")[0]) >= 5
needs_stacked_experts = pytest.mark.skipif(not TRANSFORMERS_5, reason="transformers < 5: experts are not stacked")


def gpt2_config():
    config = dict(n_layer=2, n_embd=64, n_head=4, n_positions=32, use_cache=False, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2Config(vocab_size=VOCAB, **config)


DECODER = dict(
    num_hidden_layers=2,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    max_position_embeddings=32,
    use_cache=False,
)


def llama_config():
    return transformers.LlamaConfig(**DECODER)


def qwen3_config():
    return transformers.Qwen3Config(head_dim=16, **DECODER)


def qwen3_moe_config():
    """A mixture of 4 experts, 2 per token, stacked as transformers keeps them."""
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    return transformers.Qwen3MoeConfig(head_dim=16, **DECODER, **moe)


MODELS = {
    "gpt2": (transformers.GPT2LMHeadModel, gpt2_config),
    "llama": (transformers.LlamaForCausalLM, llama_config),
    "qwen3": (transformers.Qwen3ForCausalLM, qwen3_config),
}
# Built by name like MODELS, but not among the models that suites run over: transformers
# saves its experts one tensor each, which a checkpoint compile refuses.
MIXTURES = {"qwen3_moe": (transformers.Qwen3MoeForCausalLM, qwen3_moe_config)}
ARCHITECTURES = {**MODELS, **MIXTURES}


def bert():
    config = transformers.BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=128,
        max_position_embeddings=64,
    )
    return transformers.BertModel(config).eval()


def vit():
    config = transformers.ViTConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32, patch_size=8
    )
    return transformers.ViTModel(config).eval()


def resnet():
    config = transformers.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1])
    return transformers.ResNetModel(config).eval()


def built(name: str) -> nn.Module:
    """One of MODELS or MIXTURES with random weights, in eval mode."""
    cls, config = ARCHITECTURES[name]
    return cls(config()).eval()


def briefly_trained(name: str, steps: int = 40) -> nn.Module:
    """One of MODELS trained for `steps` on a task with several likely next tokens per
    token (0.4, 0.3 and 0.2 for three functions of it, 0.1 for any), in eval mode: its
    logits have a trained model's margins between the likely tokens, where random weights
    leave near-ties that any rounding flips."""
    torch.manual_seed(0)
    model = built(name).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        ids = torch.randint(0, VOCAB, (16, 16))
        pick = torch.rand(ids.shape)
        likely = torch.where(pick < 0.4, ids * 3 + 1, torch.where(pick < 0.7, ids * 5 + 2, ids * 7 + 3))
        target = torch.where(pick < 0.9, likely % VOCAB, torch.randint(0, VOCAB, ids.shape))
        loss = torch.nn.functional.cross_entropy(logits(model(ids)).flatten(0, 1), target.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def saved_model(name: str, directory, sharded: bool):
    """A model with random weights, saved as Hugging Face saves it (tied weights once; with
    `sharded`, an index over several files); returns it in eval mode."""
    torch.manual_seed(0)
    model = built(name)
    model.save_pretrained(directory, max_shard_size="60KB" if sharded else "10GB")
    return model


def meta_model(name: str) -> nn.Module:
    cls, config = ARCHITECTURES[name]
    with torch.device("meta"):
        return cls(config())


def logits(output) -> torch.Tensor:
    return output["logits"] if isinstance(output, dict) else output.logits
