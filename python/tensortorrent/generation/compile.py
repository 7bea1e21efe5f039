"""tt.compile_for_generation: a causal LM compiled as a decode program and prefill programs."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..api import compile_on_target
from ..compression.accuracy import measured_accuracy
from ..compression.checkpoint import checkpoint_accuracy, compressed_for
from ..config import CompileConfig
from ..errors import InvalidArgumentError
from ..from_checkpoint import compile_checkpoint_on_target
from ..hardware.virtual import VirtualDevice
from ..runtime import CompiledModule
from ..storage.checkpoint import open_checkpoint
from ..target import resolve_target
from .cached_lm import FEATURE, CachedLM, text_config
from .module import DECODE, GenerativeModule
from .shared_residents import build_sharing_residents
from .spec import GenerationSpec


def compile_for_generation(
    model: nn.Module,
    *,
    max_length: int,
    batch_size: int = 1,
    prompt_buckets: Sequence[int] | None = None,
    config: CompileConfig | None = None,
    devices: str | list[str] = "auto",
    machine: VirtualDevice | Sequence[VirtualDevice] | None = None,
    checkpoint: object = None,
) -> GenerativeModule:
    """Compiles a Hugging Face causal LM to generate up to `max_length` tokens per row
    (prompt and new tokens), `batch_size` rows at a time: a decode program (one token per
    row) and a prefill program per prompt length in `prompt_buckets` (default: the powers
    of two from 2 up to `max_length`), all sharing the model's weights and one KV cache
    of `max_length` positions. `config`, `devices` and `machine` are tt.compile's, for
    every program; a RAM budget holds for them all (see shared_residents.py). With `checkpoint` (as tt.compile
    takes it), the weights are read from there in place, and `model` may be on the meta
    device."""
    _check_size("max_length", max_length)
    _check_size("batch_size", batch_size)
    lengths = _prompt_lengths(prompt_buckets, max_length)
    if config is not None and not isinstance(config, CompileConfig):
        raise InvalidArgumentError(f"{FEATURE}: config: expected a tt.CompileConfig, got {type(config).__name__}")
    config = config or CompileConfig()
    # A checkpoint is opened once: every program's weights are read from its files in place.
    files = open_checkpoint(checkpoint) if checkpoint is not None else None
    lm = CachedLM(compressed_for(model, config.weight_format, config.group_size, files), batch_size, max_length)
    lm = lm.eval()
    target = resolve_target(devices, machine, config, FEATURE)

    def build(length: int, shared: dict[str, torch.Tensor] | None) -> CompiledModule:
        example = _example(lm, length)
        if files is None:
            return compile_on_target(lm, example, {}, config, target, shared=shared)
        return compile_checkpoint_on_target(lm, example, {}, config, files, target, shared=shared)

    programs, shared_bytes = build_sharing_residents([DECODE, *lengths], build)
    if config.weight_format is not None:
        # Kept with the decode program: its artifact's manifest carries it, and explain() says it.
        programs[DECODE].accuracy_note = _accuracy(model, lm, max(lengths), files)
    settings = getattr(model, "generation_config", None)
    spec = GenerationSpec(
        model_name=type(model).__qualname__,
        batch_size=batch_size,
        max_length=max_length,
        cache_layers=len(lm.cache.layers),
        kv_cache_bytes=lm.cache_bytes,
        eos_token_id=getattr(settings, "eos_token_id", None),
        pad_token_id=getattr(settings, "pad_token_id", None),
        ram_budget_bytes=config.ram_budget_bytes,
    )
    return GenerativeModule(spec, programs, shared_bytes)


def _accuracy(model: nn.Module, lm: CachedLM, length: int, checkpoint) -> str:
    """The compressed model against the float one on random prompts of the longest bucket
    (at most 64 tokens), both run eagerly: the programs compute what the compressed model
    does through the same kernels. From a compressed `checkpoint` (opened), what its
    record says of its tables."""
    if checkpoint is not None:
        return checkpoint_accuracy(checkpoint.files)
    length = min(length, 64)
    ids = torch.randint(
        0, text_config(model).vocab_size, (lm.batch_size, length), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        return measured_accuracy(lm.model, model, (), {"input_ids": ids}, f"random prompts of {length} tokens")


def _example(lm: CachedLM, length: int) -> tuple:
    """Inputs of one program's shapes: `length` tokens per row written from the cache's start."""
    ids = torch.zeros((lm.batch_size, length), dtype=torch.long)
    mask = torch.ones((lm.batch_size, lm.max_length), dtype=torch.long)
    positions = torch.arange(length).expand(lm.batch_size, length)
    return ids, mask, positions, torch.tensor(0)


def _prompt_lengths(buckets: object, max_length: int) -> list[int]:
    if buckets is None:
        return [2**power for power in range(1, max_length.bit_length()) if 2**power <= max_length]
    if not isinstance(buckets, (list, tuple)) or not all(
        isinstance(b, int) and not isinstance(b, bool) and 1 < b <= max_length for b in buckets
    ):
        raise InvalidArgumentError(
            f"{FEATURE}: prompt_buckets: expected a list of prompt lengths from 2 to max_length={max_length}, "
            f"got {buckets!r}"
        )
    return sorted(set(buckets))


def _check_size(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{FEATURE}: {name}: expected an int >= 1, got {value!r}")
