"""GenerationSpec: what a generative module's programs were compiled for, besides the
programs themselves (saved in its artifact's manifest)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class GenerationSpec:
    model_name: str
    batch_size: int  # rows per program call
    max_length: int  # positions of the KV cache per row: prompt and new tokens
    cache_layers: int
    kv_cache_bytes: int  # the cache's keys and values, every row and position
    eos_token_id: int | list[int] | None  # the model's end token(s), from its generation config
    pad_token_id: int | None  # the model's padding token, from its generation config
    ram_budget_bytes: int | None  # the RAM budget all the programs share, where one was given

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> GenerationSpec:
        """Raises ValueError naming the first field missing or of the wrong type."""
        for field in fields(cls):
            if field.name not in data:
                raise ValueError(f"missing field {field.name!r}")
        spec = cls(**{field.name: data[field.name] for field in fields(cls)})
        for name in ("batch_size", "max_length", "cache_layers", "kv_cache_bytes"):
            value = getattr(spec, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"field {name!r}: expected an int >= 1, got {value!r}")
        return spec
