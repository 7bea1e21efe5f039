"""GenerativeModule: token generation through compiled programs that share one KV cache.

Generations run on the module's decode loop (decode_loop.py), which batches those that
overlap. A prompt batch is left-padded to its longest prompt, then prefilled in chunks of
the compiled prompt lengths, longest first, each chunk written into the cache where the
last one ended; every new token is then one call of the decode program (batch x 1). The
attention mask covers the whole cache, so a padded position is never attended to, and
each row's positions count its real tokens only: a padded prompt gives the tokens an
unpadded one does."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FuturesTimeout

import torch

from ..artifact.save_generation import save_generation
from ..compression import weight_format_summary
from ..errors import InvalidArgumentError
from ..runtime import CompiledModule
from ..storage.mapped_weights import is_mapped
from ..units import format_bytes
from .decode_loop import DECODE, DecodeLoop, Request, Streamer
from .sampling import Sampling
from .spec import GenerationSpec


class GenerativeModule:
    """Generates tokens with a causal LM compiled by tt.compile_for_generation."""

    def __init__(
        self, spec: GenerationSpec, programs: dict[int, CompiledModule], shared_bytes: int = 0, tokenizer=None
    ) -> None:
        """`shared_bytes`: the resident weights the programs share (shared_residents.py).
        `tokenizer`: the one its artifact holds, for serving (None: none)."""
        self.tokenizer = tokenizer
        self._spec = spec
        self._programs = programs  # tokens per call -> its compiled program; DECODE decodes
        self._shared_bytes = shared_bytes
        self._loop = DecodeLoop(programs, spec.batch_size, spec.max_length)

    @property
    def spec(self) -> GenerationSpec:
        return self._spec

    @property
    def batch_size(self) -> int:
        return self._spec.batch_size

    @property
    def max_length(self) -> int:
        return self._spec.max_length

    @property
    def prompt_lengths(self) -> list[int]:
        """The prefill programs' lengths."""
        return sorted(length for length in self._programs if length != DECODE)

    @property
    def kv_cache_bytes(self) -> int:
        """The bytes of the KV cache's keys and values, for every row and position."""
        return self._spec.kv_cache_bytes

    @property
    def rows_in_use(self) -> int:
        """The batch rows that generations hold now (0 once every one has ended)."""
        return self._loop.rows_in_use

    @property
    def shared_weight_bytes(self) -> int:
        """The weights held in RAM once for every program, where they stream (0 otherwise)."""
        return self._shared_bytes

    @property
    def programs(self) -> dict[int, CompiledModule]:
        return dict(self._programs)

    def save(self, path: str | os.PathLike, weights: str = "copy", *, tokenizer: object = None) -> str:
        """Writes every program of this module and its weights, once, as one artifact
        directory that tt.load_compiled loads back; returns the path. `weights` as
        CompiledModule.save takes it. `tokenizer` (a transformers tokenizer; by default the
        one this module was loaded with) is saved beside the programs, for serving to
        encode and decode text with."""
        parts = {length: program.artifact_parts() for length, program in self._programs.items()}
        tokenizer = tokenizer if tokenizer is not None else self.tokenizer
        return save_generation(self._spec.to_json(), parts, path, weights, tokenizer)

    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        max_new_tokens: int,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        repetition_penalty: float | None = None,
        eos_token_id: int | Sequence[int] | None = None,
        pad_token_id: int | None = None,
        seed: int | None = None,
        streamer: object = None,
    ) -> torch.Tensor:
        """The prompts (batch x tokens, left-padded where `attention_mask` says) followed by
        up to `max_new_tokens` new tokens each, as Hugging Face's generate returns them: a
        row that produced an end token (`eos_token_id`; unset, the model's generation
        config's) is filled with `pad_token_id` (unset, the model's, else the first end
        token) after it, and generation stops once every row has. With `do_sample`, tokens are
        drawn (see generation/sampling.py) from a generator seeded with `seed` (None: torch's
        global one). `streamer` is called with each step's new tokens (a tensor, one per
        row), or, where it has put() and end() (a transformers streamer), told as
        Hugging Face's generate tells it."""
        settings = dict(
            do_sample=do_sample,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            repetition_penalty=repetition_penalty,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            seed=seed,
            streamer=streamer,
        )
        request = self._request(input_ids, attention_mask, max_new_tokens, settings)
        cancelled = threading.Event()
        try:
            return self._loop.submit(request, cancelled).result()
        except BaseException:  # an interrupt while waiting: the generation stops too
            cancelled.set()
            raise

    def submit(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **settings: object
    ) -> GenerationHandle:
        """generate() with the same arguments, on a thread of this module's; the handle
        waits for its tokens or cancels it between two of them. Bad arguments raise here."""
        unknown = sorted(set(settings) - {"max_new_tokens", *DEFAULTS})
        if unknown:
            raise InvalidArgumentError(f"submit: unexpected argument(s) {unknown}; generate() takes the same")
        max_new_tokens = settings.pop("max_new_tokens", None)
        request = self._request(input_ids, attention_mask, max_new_tokens, {**DEFAULTS, **settings})
        cancelled = threading.Event()
        return GenerationHandle(self._loop.submit(request, cancelled), cancelled)

    def _request(self, input_ids, attention_mask, max_new_tokens, settings: dict) -> Request:
        """generate()'s arguments checked, with the model's end and padding tokens where unset."""
        sampling = Sampling(*(settings[name] for name in SAMPLING))
        ids, mask = self._checked_prompts(input_ids, attention_mask, max_new_tokens)
        # Unset, the end and padding tokens are the model's (its generation config), as in Hugging Face's.
        eos, pad, seed = settings["eos_token_id"], settings["pad_token_id"], settings["seed"]
        stops = _token_ids("eos_token_id", eos if eos is not None else self._spec.eos_token_id)
        pad = next(p for p in (pad, self._spec.pad_token_id, *stops, 0) if p is not None)
        _token_ids("pad_token_id", pad)
        seed = _seed(seed) if seed is not None else None
        return Request(ids, mask, max_new_tokens, sampling, stops, pad, seed, _streamer(settings["streamer"]))

    def _checked_prompts(self, input_ids, attention_mask, max_new_tokens) -> tuple[torch.Tensor, torch.Tensor]:
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.dtype != torch.long:
            got = (
                f"a {input_ids.dim()}-D {input_ids.dtype} tensor" if isinstance(input_ids, torch.Tensor) else input_ids
            )
            raise InvalidArgumentError(
                f"generate: input_ids: expected a 2-D torch.int64 tensor (batch x tokens), got {got}"
            )
        rows, length = input_ids.shape
        if not 1 <= rows <= self.batch_size:
            raise InvalidArgumentError(
                f"generate: input_ids holds {rows} prompt(s); this module was compiled for batch_size={self.batch_size}"
            )
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise InvalidArgumentError(f"generate: max_new_tokens: expected an int >= 1, got {max_new_tokens!r}")
        if length < 1 or length + max_new_tokens - 1 > self.max_length:
            raise InvalidArgumentError(
                f"generate: {length} prompt token(s) and max_new_tokens={max_new_tokens} need "
                f"{length + max_new_tokens - 1} positions of the KV cache; this module was compiled for "
                f"max_length={self.max_length}"
            )
        if attention_mask is None:
            return input_ids, torch.ones_like(input_ids)
        if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
            got = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else attention_mask
            raise InvalidArgumentError(f"generate: attention_mask: expected shape {tuple(input_ids.shape)}, got {got}")
        mask = attention_mask.long()
        if not bool(((mask == 0) | (mask == 1)).all()) or bool((mask[:, 1:] < mask[:, :-1]).any()):
            raise InvalidArgumentError(
                "generate: attention_mask: expected 0s then 1s in each row (prompts padded on the left)"
            )
        if not bool(mask[:, -1].all()):
            raise InvalidArgumentError("generate: attention_mask: a row holds no token (its mask is all 0)")
        return input_ids, mask

    def explain(self) -> str:
        decode = self._programs[DECODE]
        lines = [
            f"Generation: {self._spec.model_name}, batch_size {self.batch_size}, max_length {self.max_length}",
            f"KV cache: {format_bytes(self.kv_cache_bytes)} ({self._spec.cache_layers} layers of keys and "
            "values), written in place by every program: each layer's where the program computes it (a "
            "device holds its copy for good; a program reading it in RAM first brings that copy back)",
            "Programs (one cache, one set of weights):",
            f"  decode ({self.batch_size} x 1 token): {_predicted(decode)} per token, on {_devices(decode)}; "
            f"{_cache_tiers(decode)}",
        ]
        for length in self.prompt_lengths:
            program, shape = self._programs[length], f"{self.batch_size} x {length} tokens"
            lines.append(
                f"  prefill ({shape}): {_predicted(program)} per chunk, on {_devices(program)}; {_cache_tiers(program)}"
            )
        lines.append(
            "Prompts are left-padded to the batch's longest and prefilled in chunks of these lengths, longest first."
        )
        compressed = weight_format_summary(decode.artifact_parts().program.bound)
        if compressed:
            lines.append(f"Weights: {compressed}")
            if decode.accuracy_note:
                lines.append(f"  accuracy {decode.accuracy_note}")
        if any(program.streams_weights for program in self._programs.values()):
            budget = self._spec.ram_budget_bytes
            within = f" within the RAM budget of {format_bytes(budget)}" if budget is not None else ""
            lines.append(
                f"Weights: {format_bytes(self._shared_bytes)} held in RAM once, shared by every program; "
                f"each streams the rest from disk on every call{within}"
            )
            bound = decode.artifact_parts().program.bound
            mapped = [(b.names[0], b.nbytes) for b in bound if is_mapped(b.tensor)]
            if mapped:
                tables = ", ".join(f"{name} ({format_bytes(nbytes)})" for name, nbytes in mapped)
                lines.append(f"Mapped from disk, a call reading only what it gathers from them: {tables}")
        return "\n".join(lines)

    def close(self) -> None:
        """Releases every program's memory, once the generations running now end (those
        waiting fail with ModuleClosedError, as later calls do)."""
        self._loop.close()
        for program in self._programs.values():
            program.close()


# generate()'s settings besides max_new_tokens, with their defaults (submit() takes them by name).
DEFAULTS = {
    "do_sample": False,
    "temperature": 1.0,
    "top_k": None,
    "top_p": None,
    "repetition_penalty": None,
    "eos_token_id": None,
    "pad_token_id": None,
    "seed": None,
    "streamer": None,
}
SAMPLING = ("do_sample", "temperature", "top_k", "top_p", "repetition_penalty")  # Sampling's fields, in order


class GenerationHandle:
    """A generation started by GenerativeModule.submit. Thread-safe."""

    def __init__(self, future: Future, cancelled: threading.Event) -> None:
        self._future, self._cancelled = future, cancelled

    def result(self, timeout: float | None = None) -> torch.Tensor:
        """The token ids, waiting up to `timeout` seconds (None: as long as it takes).
        Raises what generating raised (ExecutionCancelled after cancel()), or TimeoutError."""
        try:
            return self._future.result(timeout)
        except FuturesTimeout as error:
            raise TimeoutError(f"the generation did not finish within {timeout} s; it goes on") from error

    def cancel(self) -> None:
        """Stops the generation before its next program call; nothing it used stays held."""
        self._cancelled.set()

    def done(self) -> bool:
        return self._future.done()

    def add_done_callback(self, callback: Callable[[Future], object]) -> None:
        """Calls `callback` (on the thread that finished it) once the generation has ended."""
        self._future.add_done_callback(callback)


def _predicted(program: CompiledModule) -> str:
    seconds = program.predicted_s
    return f"predicted {seconds * 1e3:.3f} ms" if seconds is not None else "not simulated"


def _devices(program: CompiledModule) -> str:
    return ", ".join(sorted(set(program.region_devices)))


def _cache_tiers(program: CompiledModule) -> str:
    tiers = program.in_place_tiers
    return "cache in " + ", ".join(f"{name} {format_bytes(nbytes)}" for name, nbytes in sorted(tiers.items()))


def _token_ids(name: str, value: object) -> list[int]:
    values = [] if value is None else [value] if isinstance(value, int) else value
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise InvalidArgumentError(f"generate: {name}: expected a token id (an int) or a list of them, got {value!r}")
    return list(values)


def _seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgumentError(f"generate: seed: expected an int, got {seed!r}")
    return seed


def _streamer(streamer: object) -> Streamer:
    if streamer is None:
        return Streamer()
    if callable(getattr(streamer, "put", None)) and callable(getattr(streamer, "end", None)):
        return Streamer(put=streamer.put, end=streamer.end)
    if callable(streamer):
        return Streamer(call=streamer)
    raise InvalidArgumentError(
        f"generate: streamer: expected a callable or an object with put() and end(), got {type(streamer).__name__}"
    )
