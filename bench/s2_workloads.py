"""Suite S2's workloads: models whose weights live in safetensors checkpoints on disk.

Each workload is built three ways: with random weights in RAM (to write its checkpoint
and to be the compute floor), on the meta device (what TensorTorrent and Accelerate
start from), and its example input. Sizes: --quick ones are a smoke test.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import transformers
from safetensors.torch import save_file
from torch import nn


@dataclass(frozen=True)
class Workload:
    name: str
    width: int
    layers: int
    vocab: int = 0  # 0: the deep MLP; else a Llama-style decoder

    def build(self) -> nn.Module:
        if not self.vocab:
            width = self.width
            return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(self.layers)])
        return transformers.LlamaForCausalLM(self.config())

    def config(self) -> transformers.LlamaConfig:
        return transformers.LlamaConfig(
            num_hidden_layers=self.layers,
            hidden_size=self.width,
            intermediate_size=self.width * 11 // 4,
            num_attention_heads=16 if self.width >= 1024 else 4,
            num_key_value_heads=8 if self.width >= 1024 else 2,
            vocab_size=self.vocab,
            max_position_embeddings=256,
            use_cache=False,
        )

    def meta(self) -> nn.Module:
        with torch.device("meta"):
            return self.build()

    def inputs(self) -> tuple[torch.Tensor, ...]:
        generator = torch.Generator().manual_seed(1)
        if not self.vocab:
            return (torch.randn(8, self.width, generator=generator),)
        return (torch.randint(0, self.vocab, (1, 16), generator=generator),)

    @property
    def block_class(self) -> str | None:
        """The layer Accelerate must not split."""
        return "LlamaDecoderLayer" if self.vocab else None


def workloads(quick: bool) -> list[Workload]:
    if quick:
        return [Workload("mlp", 512, 8), Workload("llama", 128, 2, vocab=512)]
    # About 4 GiB of fp32 weights each: 64 x 64 MiB; 18 x 189 MiB + 2 x 250 MiB.
    return [Workload("mlp", 4096, 64), Workload("llama", 2048, 18, vocab=32000)]


def write_checkpoint(workload: Workload, directory: str) -> nn.Module:
    """Writes the workload with random weights (seeded) as a safetensors checkpoint in
    `directory`, as Hugging Face shards it; returns the model, in eval mode."""
    torch.manual_seed(0)
    model = workload.build().eval()
    if workload.vocab:
        model.save_pretrained(directory, max_shard_size="1GB")
    else:
        os.makedirs(directory, exist_ok=True)
        tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(tensors, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    for name in os.listdir(directory):
        with open(os.path.join(directory, name), "rb+") as handle:
            os.fsync(handle.fileno())  # clean pages: dropping the page cache then evicts them
    return model


def weight_files(directory: str) -> list[str]:
    """The weight files in `directory` (none if it does not exist): safetensors, or Accelerate's offloaded .dat."""
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith((".safetensors", ".dat")))
