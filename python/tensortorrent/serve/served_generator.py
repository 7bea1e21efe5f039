"""A generative module as the server shows and runs it: its metadata, its tokenizer (where
its artifact holds one), and one generation of one prompt whose tokens come back, one by
one, on the event loop that asked for them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import torch

from ..generation.module import GenerationHandle, GenerativeModule
from .protocol import RequestError


@dataclass(frozen=True)
class ServedGenerator:
    name: str
    module: GenerativeModule

    @property
    def tokenizer(self):
        return self.module.tokenizer

    def metadata(self) -> dict:
        inputs = [{"name": "input_ids", "datatype": "INT64", "shape": [-1]}]
        outputs = [{"name": "output_ids", "datatype": "INT64", "shape": [-1]}]
        if self.tokenizer is not None:
            inputs.insert(0, {"name": "text_input", "datatype": "BYTES", "shape": [1]})
            outputs.insert(0, {"name": "text_output", "datatype": "BYTES", "shape": [1]})
        return {
            "name": self.name,
            "versions": ["1"],
            "platform": "tensortorrent",
            "generate": {"batch_size": self.module.batch_size, "max_length": self.module.max_length},
            "inputs": inputs,
            "outputs": outputs,
        }

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise RequestError(400, f"model {self.name!r} has no tokenizer: send input_ids (token ids), not text")
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def chat_prompt(self, messages: list[dict]) -> list[int]:
        """The prompt of a chat: the tokenizer's chat template where it has one, else each
        message as `role: content` on a line of its own, then `assistant:`."""
        if self.tokenizer is None:
            raise RequestError(400, f"model {self.name!r} has no tokenizer: chat needs one")
        if getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            return list(ids["input_ids"] if isinstance(ids, dict) else ids)
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
        return self.encode(text)

    def end_tokens(self) -> list[int]:
        """The tokens that end a generation: the model's, else the tokenizer's end token."""
        eos = self.module.spec.eos_token_id
        if eos is None and self.tokenizer is not None:
            eos = self.tokenizer.eos_token_id
        return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)

    def start(self, ids: list[int], settings: dict, loop: asyncio.AbstractEventLoop) -> Generation:
        """Submits a generation of the prompt `ids` (generate()'s `settings`); its tokens
        arrive on `loop`, through the returned Generation."""
        if not ids:
            raise RequestError(400, "the prompt holds no token")
        if len(ids) + settings["max_new_tokens"] - 1 > self.module.max_length:
            raise RequestError(
                400,
                f"{len(ids)} prompt token(s) and max_tokens={settings['max_new_tokens']} need more than the "
                f"{self.module.max_length} positions model {self.name!r} was compiled for",
            )
        generation = Generation(self.name, settings["eos_token_id"] or [], loop)
        prompt = torch.tensor([ids], dtype=torch.long)
        generation.handle = self.module.submit(prompt, streamer=generation.put_tokens, **settings)
        generation.handle.add_done_callback(generation.finished)
        return generation


class Generation:
    """One generation's tokens as they come: `next()` waits for the next one (None once it
    has ended); `cancel()` stops it between two tokens."""

    def __init__(self, model: str, stops: list[int], loop: asyncio.AbstractEventLoop) -> None:
        self.model, self.stops, self._loop = model, stops, loop
        self._tokens: asyncio.Queue = asyncio.Queue()
        self.handle: GenerationHandle | None = None

    def put_tokens(self, tokens: torch.Tensor) -> None:  # on the decode loop's thread
        self._loop.call_soon_threadsafe(self._tokens.put_nowait, int(tokens[0]))

    def finished(self, _future) -> None:  # on the decode loop's thread, after the last token
        self._loop.call_soon_threadsafe(self._tokens.put_nowait, None)

    async def next(self) -> int | None:
        return await self._tokens.get()

    def result(self) -> torch.Tensor:
        """The prompt and every token, once finished; raises what stopped it."""
        return self.handle.result(timeout=0)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
