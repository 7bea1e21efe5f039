"""The HTTP application: the KServe v2 routes over compiled modules, with bearer-token auth,
body limits, deadlines, client disconnects and Prometheus metrics.

Routes: GET /v2, /v2/health/live, /v2/health/ready, /v2/models/{name},
/v2/models/{name}/ready, /metrics, and POST /v2/models/{name}/infer (JSON tensors, or a
JSON header and raw tensor bytes: the binary tensor extension); for generative modules,
the generation routes (generation_routes.py). With
an API key, every route but the live and ready probes needs `Authorization: Bearer KEY`
(compared in constant time). Errors are JSON `{"error": "..."}` with their status.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from ..generation.module import GenerativeModule
from ..runtime.compiled_module import CompiledModule
from ..version import __version__
from .batcher import Batcher, Pending
from .generation_routes import GenerationRoutes
from .http_io import disconnected, error_response, read_body
from .metrics import ServeMetrics
from .protocol import ClientGone, RequestError, binary_outputs, decode_inputs, encode_output
from .served_generator import ServedGenerator
from .served_model import ServedModel

PUBLIC = ("/v2/health/live", "/v2/health/ready")  # the probes: no token needed
HEADER_LENGTH = "Inference-Header-Content-Length"  # the binary tensor extension's JSON size


@dataclass(frozen=True)
class ServeSettings:
    """max_queue_size: requests waiting per model before 503. max_queue_delay_us: how long
    a batch waits for more requests. timeout_s: a request's deadline unless it asks for
    another (request parameter "timeout", in microseconds, as Triton's clients send it),
    capped at max_timeout_s. max_body_bytes: larger bodies get 413. api_key: the bearer
    token every route but the probes needs (None: none needed)."""

    max_queue_size: int = 64
    max_queue_delay_us: int = 0
    timeout_s: float = 30.0
    max_timeout_s: float = 300.0
    max_body_bytes: int = 64 << 20
    api_key: str | None = None
    drain_timeout_s: float = 30.0


class Server:
    """The served models, their batchers and metrics; `app` is the ASGI application."""

    def __init__(self, models: dict[str, CompiledModule | GenerativeModule], settings: ServeSettings) -> None:
        self.settings = settings
        self.metrics = ServeMetrics()
        generative = {name: module for name, module in models.items() if isinstance(module, GenerativeModule)}
        self.generators = {name: ServedGenerator(name, module) for name, module in generative.items()}
        self.models = {
            name: ServedModel.of(name, compiled) for name, compiled in models.items() if name not in generative
        }
        delay = settings.max_queue_delay_us / 1e6
        self.batchers = {
            name: Batcher(model, settings.max_queue_size, delay, self.metrics) for name, model in self.models.items()
        }
        self.ready = True
        self.generation = GenerationRoutes(self.generators, settings, self.metrics, lambda: self.ready)
        self.app = self._build()

    def close(self) -> None:
        """Ready turns false; queued and running requests finish within the drain timeout
        (generations: those running end, those waiting are refused)."""
        self.ready = False
        for batcher in self.batchers.values():
            batcher.close(self.settings.drain_timeout_s)
        for served in self.generators.values():
            served.module.close()

    def _build(self) -> FastAPI:
        # A dependency, not a middleware: an HTTP middleware would hide client disconnects from the routes.
        app = FastAPI(
            title="TensorTorrent",
            version=__version__,
            docs_url=None,
            redoc_url=None,
            openapi_url=None,
            dependencies=[Depends(self._authorize)],
        )
        app.add_exception_handler(RequestError, lambda request, error: error_response(error))

        @app.get("/v2")
        async def server_metadata():
            extensions = ["binary_tensor_data"] + (["generate"] if self.generators else [])
            return {"name": "tensortorrent", "version": __version__, "extensions": extensions}

        @app.get("/v2/health/live")
        async def live():
            return Response(status_code=200)

        @app.get("/v2/health/ready")
        async def ready():
            return Response(status_code=200 if self.ready else 503)

        @app.get("/v2/models/{name}")
        async def model_metadata(name: str):
            try:
                return self._model(name).metadata()
            except RequestError as error:
                return error_response(error)

        @app.get("/v2/models/{name}/ready")
        async def model_ready(name: str):
            try:
                self._model(name)
            except RequestError as error:
                return error_response(error)
            return Response(status_code=200 if self.ready else 503)

        @app.get("/metrics")
        async def metrics():
            return Response(self.metrics.text(), media_type="text/plain; version=0.0.4")

        @app.post("/v2/models/{name}/infer")
        async def infer(name: str, request: Request):
            return await self._infer(name, request)

        self.generation.add_to(app)
        return app

    def _authorize(self, request: Request) -> None:
        key = self.settings.api_key
        if key is None or request.url.path in PUBLIC:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), key.encode()):
            raise RequestError(401, "a bearer token is required")

    def _model(self, name: str) -> ServedModel | ServedGenerator:
        if name in self.generators:
            return self.generators[name]
        if name not in self.models:
            raise RequestError(404, f"unknown model {name!r}; served: {sorted(self.models) + sorted(self.generators)}")
        return self.models[name]

    async def _infer(self, name: str, request: Request) -> Response:
        arrived = time.monotonic()
        label = name if name in self.models else "unknown"
        self.metrics.in_flight.labels(label).inc()
        try:
            response = await self._answer(name, request, arrived)
        except RequestError as error:
            response = error_response(error)
        finally:
            self.metrics.in_flight.labels(label).dec()
        self.metrics.answered(label, response.status_code, arrived)
        return response

    async def _answer(self, name: str, request: Request, arrived: float) -> Response:
        model = self._model(name)
        if isinstance(model, ServedGenerator):
            raise RequestError(400, f"model {name!r} generates text: POST /v2/models/{name}/generate instead")
        try:
            body = await read_body(request, self.settings.max_body_bytes)
        except ClientGone:
            self.metrics.rejections.labels(name, "disconnected").inc()
            raise
        header, binary = _split_body(body, request.headers.get(HEADER_LENGTH))
        try:
            payload = json.loads(header)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise RequestError(400, f"the body is not JSON: {error}") from None
        tensors, rows = decode_inputs(payload, list(model.inputs), model.batch_size, binary)
        wanted = binary_outputs(payload, [spec.name for spec in model.outputs])
        timeout = self._timeout_s(payload)
        pending = Pending(tensors, rows, deadline=arrived + timeout)
        batcher = self.batchers[name]
        batcher.submit(pending)
        answer = await self._wait(batcher, pending, request, arrived + timeout - time.monotonic())
        encoded = [encode_output(name_, answer[name_], raw) for name_, raw in wanted.items()]
        reply: dict[str, Any] = {"model_name": name, "model_version": "1", "outputs": [e for e, _ in encoded]}
        if isinstance(payload.get("id"), str):
            reply["id"] = payload["id"]
        if not any(wanted.values()):
            return JSONResponse(reply)
        head = json.dumps(reply).encode()
        content = head + b"".join(raw for _, raw in encoded)
        return Response(content, media_type="application/octet-stream", headers={HEADER_LENGTH: str(len(head))})

    async def _wait(self, batcher: Batcher, pending: Pending, request: Request, timeout: float) -> dict:
        """The request's outputs; gives it up (504, or the client gone) as its batcher is told."""
        result = asyncio.wrap_future(pending.future)
        watch = asyncio.ensure_future(disconnected(request))
        try:
            done, _ = await asyncio.wait(
                {result, watch}, timeout=max(timeout, 0.0), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            watch.cancel()
        if result in done:
            return result.result()
        if watch in done:
            batcher.abandon(pending, "disconnected", RequestError(499, "the client went away"))
            raise RequestError(499, "the client went away")
        batcher.abandon(pending, "timeout", RequestError(504, "the request's deadline passed"))
        return await result  # the deadline's 504, unless its answer came first

    def _timeout_s(self, payload: dict) -> float:
        parameters = payload.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise RequestError(400, f'"parameters" must be an object, got {type(parameters).__name__}')
        asked = parameters.get("timeout")
        if asked is None:
            return min(self.settings.timeout_s, self.settings.max_timeout_s)
        if isinstance(asked, bool) or not isinstance(asked, int) or asked <= 0:
            raise RequestError(400, f'parameter "timeout": expected microseconds as an integer > 0, got {asked!r}')
        return min(asked / 1e6, self.settings.max_timeout_s)


def _split_body(body: bytes, header_length: str | None) -> tuple[bytes, bytes]:
    """The JSON header and the binary data after it (the binary tensor extension)."""
    if header_length is None:
        return body, b""
    if not header_length.isdigit() or int(header_length) > len(body):
        raise RequestError(
            400, f"{HEADER_LENGTH}: expected at most the body's {len(body)} bytes, got {header_length!r}"
        )
    return body[: int(header_length)], body[int(header_length) :]
