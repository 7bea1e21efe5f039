"""Reading a request and answering it, for every route: the body within its limit, a
client that went away, an error as JSON `{"error": "..."}` with its status."""

from __future__ import annotations

import asyncio

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from .protocol import ClientGone, RequestError

DISCONNECT_POLL_S = 0.05


async def read_body(request: Request, limit: int) -> bytes:
    """The request body; RequestError(413) as soon as it is known to exceed `limit`, or
    ClientGone when the client hangs up before sending all of it."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(413, f"the body has {declared} bytes; the limit is {limit}")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestError(413, f"the body exceeds the limit of {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:
        raise ClientGone(f"the client went away after {size} bytes of its body") from None
    return b"".join(chunks)


async def disconnected(request: Request) -> None:
    """Returns once the client has gone away."""
    while not await request.is_disconnected():
        await asyncio.sleep(DISCONNECT_POLL_S)


def error_response(error: RequestError) -> JSONResponse:
    """The error as JSON; a 401 says how to authenticate, a 503 when to try again."""
    headers = {401: {"WWW-Authenticate": "Bearer"}, 503: {"Retry-After": "1"}}.get(error.status)
    return JSONResponse({"error": str(error)}, status_code=error.status, headers=headers)
