"""Reading a request body from a client that may be slow on purpose.

Owns `read_json` (a small JSON body, at most 64 KiB, validated against a
schema), `small_body` (such a body's bytes, for a caller that checks them
itself: a webhook's signature, Harbor's scan request) and `body_chunks(request, idle_timeout, min_rate)`: the body's chunks as
they arrive, but a body silent for `idle_timeout` seconds, or averaging less
than `min_rate` bytes per second once it has run `idle_timeout` seconds (a
slow start is forgiven for as long as silence is), ends the request with 408
(and the connection is closed). Together with the
header timeout (`service.server.h11_protocol`) and the bound on uploads received at
once (`service.imports.limiter`), a client cannot hold a place for long by sending
slowly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from service.api.problems import ProblemError
from service.settings.kinds import format_size

MAX_JSON_BODY = 64 << 10
Schema = TypeVar("Schema", bound=BaseModel)


def _too_slow(detail: str) -> ProblemError:
    return ProblemError("request-timeout", detail, headers={"Connection": "close"})


async def body_chunks(request: Request, idle_timeout: float, min_rate: int) -> AsyncIterator[bytes]:
    stream = request.stream().__aiter__()
    loop = asyncio.get_running_loop()
    started = loop.time()
    received = 0
    while True:
        try:
            # one deadline moved per chunk (asyncio.wait_for made a task per chunk)
            async with asyncio.timeout(idle_timeout):
                chunk = await anext(stream)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise _too_slow(f"the request body was silent for {idle_timeout:g} s") from None
        received += len(chunk)
        elapsed = loop.time() - started
        if min_rate and elapsed > idle_timeout and received < min_rate * elapsed:
            raise _too_slow(f"the request body arrives at {received / elapsed:.0f} bytes/s, below the minimum of {format_size(min_rate)}/s")
        yield chunk


async def small_body(request: Request, idle_timeout: float) -> bytes | None:
    """The body, if it is at most MAX_JSON_BODY bytes; None once it is past them (read no further)."""
    body = bytearray()
    async for chunk in body_chunks(request, idle_timeout, 0):
        body += chunk
        if len(body) > MAX_JSON_BODY:
            return None
    return bytes(body)


async def read_json(request: Request, schema: type[Schema], idle_timeout: float) -> Schema:
    """A JSON body of at most MAX_JSON_BODY bytes, validated (422 otherwise)."""
    if (body := await small_body(request, idle_timeout)) is None:
        raise ProblemError("payload-too-large", f"a JSON request body is at most {MAX_JSON_BODY} bytes")
    try:
        return schema.model_validate_json(body)
    except ValidationError as error:
        raise RequestValidationError(error.errors(include_url=False, include_input=False)) from None
