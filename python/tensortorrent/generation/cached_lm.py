"""CachedLM: a Hugging Face causal LM whose KV cache is buffers of its own.

The cache is transformers' StaticCache sized for `max_length` tokens per row, its keys,
values and write positions registered as this module's buffers. Every program compiled
from the module (prefill chunks of several lengths, one-token decode) reads and writes
those same tensors: export records the writes as buffer mutations (a functional copy of
each layer's cache), and the regions that make them write the buffers in place instead
(capture/program.py's IN_PLACE), so that no call copies the cache.

A call takes its tokens (batch x length), the attention mask over the whole cache
(batch x max_length: 1 where a position holds a real token), the tokens' positions
(left-padded rows start later), and `start`, where in the cache the tokens go. It
returns the logits of each row's last token."""

from __future__ import annotations

import inspect

import torch
from torch import nn

from ..errors import InvalidArgumentError, UnsupportedFeatureError

FEATURE = "tt.compile_for_generation"


class CachedLM(nn.Module):
    def __init__(self, model: nn.Module, batch_size: int, max_length: int) -> None:
        super().__init__()
        static_cache = _static_cache_class()
        config = text_config(model)
        self.model = model
        self.max_length = max_length
        self.batch_size = batch_size
        parameters = inspect.signature(model.forward).parameters
        # The cache's keyword: `cache` in transformers 5, `past_key_values` before.
        self._cache_keyword = "cache" if "cache" in parameters else "past_key_values"
        if self._cache_keyword not in parameters or "logits_to_keep" not in parameters:
            raise UnsupportedFeatureError(
                FEATURE,
                f"{type(model).__name__}, whose forward takes no cache and logits_to_keep (not a causal LM)",
                "pass a Hugging Face causal LM (GPT-2, Llama, Qwen3, Mistral, Phi-3, ...)",
            )
        window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None
        if window is not None and max_length > window:
            raise UnsupportedFeatureError(
                FEATURE,
                f"max_length={max_length} beyond the model's sliding attention window of {window} tokens",
                f"pass max_length <= {window}",
            )
        positions = getattr(config, "max_position_embeddings", None)
        if positions is not None and max_length > positions:
            raise InvalidArgumentError(
                f"{FEATURE}: max_length={max_length} exceeds the model's max_position_embeddings={positions}"
            )
        self.cache = static_cache(config=config, max_cache_len=max_length)
        heads, head_dim = _head_shapes(config)
        # The model's float dtype: a compressed model's first parameters may be integers.
        self.dtype = next(p.dtype for p in model.parameters() if p.is_floating_point())
        self.cache.early_initialization(batch_size, heads, head_dim, self.dtype, torch.device("cpu"))
        # transformers 5's layers keep their write position (a tensor, cumulative_length,
        # set from `start` on each call); before 5 the model takes it as cache_position.
        self._positions_in_cache = all(
            isinstance(getattr(layer, "cumulative_length", None), torch.Tensor) for layer in self.cache.layers
        )
        for index, layer in enumerate(self.cache.layers):
            self.register_buffer(f"key_cache_{index}", layer.keys, persistent=False)
            self.register_buffer(f"value_cache_{index}", layer.values, persistent=False)
            if self._positions_in_cache:
                self.register_buffer(f"cache_length_{index}", layer.cumulative_length, persistent=False)

    @property
    def cache_bytes(self) -> int:
        """The bytes of the cache's keys and values."""
        return sum(layer.keys.nbytes + layer.values.nbytes for layer in self.cache.layers)

    def forward(self, input_ids, attention_mask, position_ids, start):
        for index, layer in enumerate(self.cache.layers):
            # Export traces the module with its buffers swapped for its own tensors: the
            # cache writes to whatever the buffers are now, so that export sees the writes.
            layer.keys = getattr(self, f"key_cache_{index}")
            layer.values = getattr(self, f"value_cache_{index}")
            if self._positions_in_cache:
                layer.cumulative_length = getattr(self, f"cache_length_{index}")
                layer.cumulative_length.copy_(start)
        where = {self._cache_keyword: self.cache}
        if not self._positions_in_cache:
            where["cache_position"] = start + torch.arange(input_ids.shape[1])
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=self._mask(attention_mask, start, input_ids.shape[1]),
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=1,
            **where,
        )
        return outputs.logits[:, -1, :]

    def _mask(self, attention_mask, start, length: int):
        """The additive 4-D mask (batch x 1 x length x max_length): each token sees the
        real tokens at or before its own cache position. Passed as it is, the model's own
        mask code is skipped, so every transformers version masks alike."""
        dtype = self.dtype
        queries = start + torch.arange(length)
        keys = torch.arange(self.max_length)
        seen = (keys[None, :] <= queries[:, None])[None, None] & attention_mask[:, None, None, :].bool()
        return torch.zeros(seen.shape, dtype=dtype).masked_fill(~seen, torch.finfo(dtype).min)


def _static_cache_class():
    try:
        from transformers import StaticCache
    except ImportError as error:
        raise UnsupportedFeatureError(FEATURE, "a machine without transformers", "pip install transformers") from error
    if not hasattr(StaticCache, "early_initialization"):
        import transformers

        raise UnsupportedFeatureError(
            FEATURE,
            f"transformers {transformers.__version__}, whose StaticCache cannot be sized before its first call",
            "pip install 'transformers>=4.56'",
        )
    return StaticCache


def text_config(model: nn.Module):
    config = getattr(model, "config", None)
    if config is None:
        raise InvalidArgumentError(
            f"{FEATURE}: model: expected a Hugging Face causal LM (a model with a .config), got {type(model).__name__}"
        )
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _head_shapes(config) -> tuple[int, int]:
    """Key/value heads and the head size, the same for every layer."""
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return heads, head_dim
