"""The generation routes: KServe's generate extension and OpenAI's completions.

POST /v2/models/{name}/generate and /generate_stream (server-sent events, one per
token), POST /v1/completions and /v1/chat/completions (`"stream": true` for events, then
`data: [DONE]`), GET /v1/models. Every generation joins its model's decode loop, which
batches the requests that overlap. A request waits at most its deadline (the server's
timeout, or its "timeout" parameter in microseconds) and is cancelled when its client
goes away; a model with max_queue_size requests generating or waiting refuses more (503)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..errors import ExecutionCancelled, InvalidArgumentError
from ..generation.text_stream import TextStream
from .generation_requests import Ask, chat_ask, completion_ask, kserve_ask
from .http_io import disconnected, error_response, read_body
from .metrics import ServeMetrics
from .protocol import ClientGone, RequestError
from .served_generator import Generation, ServedGenerator


@dataclass
class _Answer:
    """A generation's progress, for the reply: its text, its new token ids, why it ended."""

    text: TextStream | None
    prompt_tokens: int
    ids: list[int] = field(default_factory=list)
    finish: str = "length"  # or "stop": an end token or a stop string
    first_s: float | None = None  # when the first token came (time.monotonic)


class GenerationRoutes:
    def __init__(self, generators: dict[str, ServedGenerator], settings, metrics: ServeMetrics, is_ready) -> None:
        self.generators, self.settings, self.metrics, self._is_ready = generators, settings, metrics, is_ready
        self._running = dict.fromkeys(generators, 0)  # per model: requests generating or waiting

    def add_to(self, app: FastAPI) -> None:
        @app.post("/v2/models/{name}/generate")
        async def generate(name: str, request: Request):
            return await self._serve(name, request, lambda body: kserve_ask(body, stream=False), _Kserve(name))

        @app.post("/v2/models/{name}/generate_stream")
        async def generate_stream(name: str, request: Request):
            return await self._serve(name, request, lambda body: kserve_ask(body, stream=True), _Kserve(name))

        @app.post("/v1/completions")
        async def completions(request: Request):
            return await self._serve(None, request, completion_ask, _OpenAI(chat=False))

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request):
            return await self._serve(None, request, chat_ask, _OpenAI(chat=True))

        @app.get("/v1/models")
        async def models():
            listed = [{"id": name, "object": "model", "owned_by": "tensortorrent"} for name in self.generators]
            return {"object": "list", "data": listed}

    async def _serve(self, name: str | None, request: Request, parse: Callable, reply) -> Response:
        arrived = time.monotonic()
        label = "unknown"
        try:
            payload = json.loads(await read_body(request, self.settings.max_body_bytes))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            return self._count(label, error_response(RequestError(400, f"the body is not JSON: {error}")), arrived)
        except RequestError as error:
            if isinstance(error, ClientGone):
                self.metrics.rejections.labels(label, "disconnected").inc()
            return self._count(label, error_response(error), arrived)
        try:
            name = name if name is not None else _model_field(payload)
            served = self._generator(name)
            label = name
            ask = parse(payload)
            if reply.needs_tokenizer and served.tokenizer is None:
                raise RequestError(400, f"model {name!r} has no tokenizer: its artifact was saved without one")
            reply.model = name
            generation, answer = self._start(served, ask, arrived)
        except RequestError as error:
            return self._count(label, error_response(error), arrived)
        deadline = arrived + self._timeout_s(payload)
        if ask.stream:
            events = self._events(served, generation, answer, reply, deadline, arrived)
            return StreamingResponse(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        try:
            await self._collect(generation, answer, request, deadline)
        except RequestError as error:
            return self._count(label, error_response(error), arrived)
        finally:
            self._done(served, answer, arrived)
        return self._count(label, JSONResponse(reply.whole(answer, generation)), arrived)

    def _start(self, served: ServedGenerator, ask: Ask, arrived: float) -> tuple[Generation, _Answer]:
        if not self._is_ready():
            raise RequestError(503, "the server is shutting down")
        if self._running[served.name] >= self.settings.max_queue_size:
            self.metrics.rejections.labels(served.name, "queue_full").inc()
            raise RequestError(503, f"model {served.name!r} has {self.settings.max_queue_size} requests already")
        if ask.messages is not None:
            ids = served.chat_prompt(ask.messages)
        else:
            ids = ask.ids if ask.ids is not None else served.encode(ask.text)
        text = TextStream(served.tokenizer, ask.stops) if served.tokenizer is not None else None
        if ask.stops and text is None:
            raise RequestError(400, f"model {served.name!r} has no tokenizer: stop strings need one")
        settings = {**ask.settings, "eos_token_id": served.end_tokens() or None}
        try:
            generation = served.start(ids, settings, asyncio.get_running_loop())
        except InvalidArgumentError as error:
            raise RequestError(400, str(error)) from None
        self._running[served.name] += 1
        return generation, _Answer(text, len(ids))

    async def _next(self, generation: Generation, answer: _Answer, deadline: float) -> int | None:
        """The next token (None once the generation ended), noted in `answer`; a 504 at the deadline."""
        try:
            token = await asyncio.wait_for(generation.next(), max(deadline - time.monotonic(), 0.0))
        except asyncio.TimeoutError:
            generation.cancel()
            self.metrics.rejections.labels(generation.model, "timeout").inc()
            raise RequestError(504, "the request's deadline passed") from None
        if token is None:
            return None
        if answer.first_s is None:
            answer.first_s = time.monotonic()
        answer.ids.append(token)
        return token

    async def _collect(self, generation: Generation, answer: _Answer, request: Request, deadline: float) -> None:
        """Every token, while the client waits."""
        watch = asyncio.ensure_future(disconnected(request))
        try:
            while True:
                step = asyncio.ensure_future(self._next(generation, answer, deadline))
                done, _ = await asyncio.wait({step, watch}, return_when=asyncio.FIRST_COMPLETED)
                if step not in done:
                    step.cancel()
                    generation.cancel()
                    raise RequestError(499, "the client went away")
                token = step.result()
                if token is None:
                    break
                if answer.text is not None:
                    answer.text.push(token)
                    if answer.text.stopped:
                        generation.cancel()
                        break
        finally:
            watch.cancel()
        _settle(generation, answer)

    async def _events(self, served, generation, answer, reply, deadline, arrived) -> AsyncIterator[bytes]:
        """The server-sent events of a streamed generation: one per token's text."""
        code = 200
        try:
            while True:
                try:
                    token = await self._next(generation, answer, deadline)
                    if token is None:
                        _settle(generation, answer)
                except RequestError as error:
                    code = error.status
                    yield _event({"error": str(error)})
                    return
                if token is None:
                    break
                piece = answer.text.push(token) if answer.text is not None else ""
                yield _event(reply.piece(piece, token))
                if answer.text is not None and answer.text.stopped:
                    answer.finish = "stop"
                    break
            rest = answer.text.rest() if answer.text is not None else ""
            for event in reply.last(rest, answer):
                yield _event(event)
            if reply.done is not None:
                yield reply.done
        finally:  # the client went away (the response is cancelled), or the stream ended
            generation.cancel()
            self._done(served, answer, arrived)
            self.metrics.answered(served.name, code, arrived)

    def _done(self, served: ServedGenerator, answer: _Answer, arrived: float) -> None:
        self._running[served.name] -= 1
        if answer.first_s is None:
            return
        self.metrics.first_token_seconds.labels(served.name).observe(answer.first_s - arrived)
        self.metrics.generated_tokens.labels(served.name).inc(len(answer.ids))
        after_first = time.monotonic() - answer.first_s
        if len(answer.ids) > 1 and after_first > 0:
            self.metrics.decode_tokens_per_s.labels(served.name).observe((len(answer.ids) - 1) / after_first)

    def _count(self, label: str, response: Response, arrived: float) -> Response:
        self.metrics.answered(label, response.status_code, arrived)
        return response

    def _generator(self, name: str) -> ServedGenerator:
        if name not in self.generators:
            raise RequestError(404, f"no generative model {name!r}; served: {sorted(self.generators)}")
        return self.generators[name]

    def _timeout_s(self, payload: dict) -> float:
        parameters = payload.get("parameters") if isinstance(payload.get("parameters"), dict) else {}
        asked = parameters.get("timeout")
        if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0:
            return min(asked / 1e6, self.settings.max_timeout_s)
        return min(self.settings.timeout_s, self.settings.max_timeout_s)


def _settle(generation: Generation, answer: _Answer) -> None:
    """Why it ended: an end token or a stop string ("stop"), else max_tokens ("length");
    raises a 500 for a generation that failed."""
    if answer.text is not None and answer.text.stopped:
        answer.finish = "stop"
        return
    try:
        generation.result()
    except ExecutionCancelled:
        return
    except Exception as error:
        raise RequestError(500, f"the generation failed: {error}") from error
    if answer.ids and answer.ids[-1] in generation.stops:
        answer.finish = "stop"


def _model_field(payload: object) -> str:
    model = payload.get("model") if isinstance(payload, dict) else None
    if not isinstance(model, str):
        raise RequestError(400, f'"model": expected the name of a served model, got {model!r}')
    return model


def _event(data: dict) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


class _Kserve:
    """KServe's generate replies: text_output (with a tokenizer) and output_ids."""

    needs_tokenizer = False
    done = None  # the stream just ends

    def __init__(self, model: str) -> None:
        self.model = model

    def whole(self, answer: _Answer, generation: Generation) -> dict:
        reply = {"model_name": self.model, "model_version": "1", "output_ids": answer.ids}
        if answer.text is not None:
            reply["text_output"] = answer.text.text + answer.text.rest()
        return reply

    def piece(self, text: str, token: int | None) -> dict:
        ids = [token] if token is not None else []
        return {"model_name": self.model, "model_version": "1", "text_output": text, "output_ids": ids}

    def last(self, rest: str, answer: _Answer) -> list[dict]:
        """The text held back at the end (a character cut short), with no token of its own."""
        return [self.piece(rest, None)] if rest else []


class _OpenAI:
    """OpenAI's completion and chat completion replies, whole or as chunks."""

    needs_tokenizer = True
    done = b"data: [DONE]\n\n"  # the stream's last event

    def __init__(self, chat: bool) -> None:
        self.chat, self.model = chat, ""
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self._told_role = False

    def _head(self, chunk: bool) -> dict:
        kind = ("chat.completion" if self.chat else "text_completion") + (".chunk" if chunk and self.chat else "")
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def whole(self, answer: _Answer, generation: Generation) -> dict:
        text = answer.text.text + answer.text.rest()
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": answer.finish}
        else:
            choice = {"index": 0, "text": text, "finish_reason": answer.finish, "logprobs": None}
        completion = len(answer.ids)
        usage = {"prompt_tokens": answer.prompt_tokens, "completion_tokens": completion}
        usage["total_tokens"] = answer.prompt_tokens + completion
        return {**self._head(False), "choices": [choice], "usage": usage}

    def piece(self, text: str, token: int | None, finish: str | None = None) -> dict:
        if self.chat:
            delta = {"content": text}
            if not self._told_role:
                delta, self._told_role = {"role": "assistant", **delta}, True
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
        return {**self._head(True), "choices": [choice]}

    def last(self, rest: str, answer: _Answer) -> list:
        return [self.piece(rest, None, answer.finish)]
