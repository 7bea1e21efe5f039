"""What a generation request asks, read from the body of each API that asks for one:
KServe's generate extension (`text_input` or `input_ids`, settings in `parameters` or
beside them), OpenAI's completions (`prompt`) and chat completions (`messages`). Every
malformed field is a 400 naming what was expected and what came."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .protocol import RequestError

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions


@dataclass
class Ask:
    text: str | None = None  # a prompt to tokenize
    ids: list[int] | None = None  # or its token ids
    messages: list[dict] | None = None  # or a chat
    settings: dict[str, Any] = field(default_factory=dict)  # GenerativeModule.generate()'s
    stops: list[str] = field(default_factory=list)  # strings that end the text
    stream: bool = False


def kserve_ask(payload: object, stream: bool) -> Ask:
    """KServe's generate extension: {"text_input": ... or "input_ids": [...], "parameters":
    {...}}, the settings also accepted beside the input. Greedy unless it asks to sample
    (do_sample, or a temperature above 0)."""
    body = _object(payload, "the body")
    parameters = {k: v for k, v in body.items() if k not in ("text_input", "input_ids", "id", "parameters")}
    parameters.update(_object(body.get("parameters", {}), '"parameters"'))
    temperature = _number(parameters, "temperature", None)
    sample = _flag(parameters, "do_sample", temperature is not None and temperature > 0)
    settings = _sampling(parameters, "max_tokens", sample, temperature)
    prompt = _prompt(body, text="text_input", ids="input_ids")
    return Ask(**prompt, settings=settings, stops=_stops(parameters.get("stop")), stream=stream)


def completion_ask(payload: object) -> Ask:
    """OpenAI's POST /v1/completions: one prompt (a string, or token ids)."""
    body = _object(payload, "the body")
    _one_choice(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    settings, stops = _openai_sampling(body, "max_tokens"), _stops(body.get("stop"))
    return Ask(**_prompt({"prompt": prompt}, "prompt", "prompt"), settings=settings, stops=stops, stream=_stream(body))


def chat_ask(payload: object) -> Ask:
    """OpenAI's POST /v1/chat/completions: a list of {"role", "content"} messages."""
    body = _object(payload, "the body")
    _one_choice(body)
    messages = body.get("messages")
    valid = isinstance(messages, list) and messages
    valid = valid and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in messages
    )
    if not valid:
        raise RequestError(400, f'"messages": expected a list of {{"role": str, "content": str}}, got {messages!r}')
    limit = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    settings = _openai_sampling(body, limit)
    return Ask(messages=messages, settings=settings, stops=_stops(body.get("stop")), stream=_stream(body))


def _openai_sampling(body: dict, limit: str) -> dict:
    """OpenAI samples unless temperature is 0 (its default temperature is 1)."""
    temperature = _number(body, "temperature", 1.0)
    return _sampling(body, limit, temperature > 0, temperature)


def _sampling(body: dict, limit: str, sample: bool, temperature: float | None) -> dict:
    max_tokens = body.get(limit, DEFAULT_MAX_TOKENS)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise RequestError(400, f'"{limit}": expected an integer >= 1, got {max_tokens!r}')
    settings = {"max_new_tokens": max_tokens, "do_sample": sample}
    if sample:
        settings["temperature"] = temperature if temperature is not None else 1.0
        settings["top_p"] = _number(body, "top_p", None)
        top_k = body.get("top_k")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0):
            raise RequestError(400, f'"top_k": expected an integer >= 0, got {top_k!r}')
        settings["top_k"] = top_k or None
    settings["repetition_penalty"] = _number(body, "repetition_penalty", None)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RequestError(400, f'"seed": expected an integer, got {seed!r}')
    settings["seed"] = seed
    return settings


def _prompt(body: dict, text: str, ids: str) -> dict:
    value = body.get(text) if text in body else body.get(ids)
    if isinstance(value, str):
        return {"text": value}
    if isinstance(value, list) and value and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        return {"ids": value}
    names = f'"{text}"' if text == ids else f'"{text}" (a string) or "{ids}"'
    raise RequestError(400, f"{names}: expected a string or a non-empty list of token ids, got {value!r}")


def _stream(body: dict) -> bool:
    return _flag(body, "stream", False)


def _one_choice(body: dict) -> None:
    if body.get("n", 1) != 1:
        raise RequestError(400, f'"n": only 1 choice per request is served, got {body["n"]!r}')


def _stops(value: object) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise RequestError(400, f'"stop": expected a string or a list of strings, got {value!r}')
    return stops


def _object(value: object, what: str) -> dict:
    if not isinstance(value, dict):
        raise RequestError(400, f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def _number(body: dict, name: str, default: float | None) -> float | None:
    value = body.get(name, default)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
        raise RequestError(400, f'"{name}": expected a number >= 0, got {value!r}')
    return value


def _flag(body: dict, name: str, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise RequestError(400, f'"{name}": expected true or false, got {value!r}')
    return value
