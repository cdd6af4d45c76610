"""Each request's objects are freed when it ends, by reference counting.

The front end freezes what start-up made and collects rarely (service/app.py):
a request that leaves a reference cycle behind (uvicorn's request cycle kept
alive by a closure stored on it, as `offer_zero_copy` once did) makes every
request's objects wait for the cyclic collector, whose passes held `/healthz`
up to 38 ms under load (bench/README.md, issue 40). The real hardened
protocol serves a plain ASGI app here, in a thread, with the collector off.
"""

from __future__ import annotations

import asyncio
import gc
import http.client
import threading
from collections.abc import Iterator

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import RequestResponseCycle

from service.api.file_range_response import ZERO_COPY
from service.server.h11_protocol import protocol_class

REQUESTS = 200


async def answer(scope: Scope, receive: Receive, send: Send) -> None:
    assert ZERO_COPY in scope["extensions"]  # the zero-copy send was offered to this request
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture()
def server() -> Iterator[uvicorn.Server]:
    config = uvicorn.Config(answer, host="127.0.0.1", port=0, http=protocol_class(5.0), lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    while not server.started:
        threading.Event().wait(0.01)
    yield server
    server.should_exit = True
    thread.join(10)


def _live_cycles() -> int:
    # type(), not isinstance(): isinstance asks an object's __class__, and a lazy module another test of this
    # process imported (torch's) answers that with a deprecation warning
    return sum(1 for thing in gc.get_objects() if type(thing) is RequestResponseCycle)


def test_no_request_leaves_a_reference_cycle_behind(server: uvicorn.Server) -> None:
    port = server.servers[0].sockets[0].getsockname()[1]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    gc.collect()
    gc.disable()
    try:
        before = _live_cycles()
        for _ in range(REQUESTS):
            connection.request("GET", "/healthz")
            response = connection.getresponse()
            assert (response.status, response.read()) == (200, b"ok")
        left = _live_cycles() - before
    finally:
        gc.enable()
        connection.close()
    assert left <= 1, f"{left} of {REQUESTS} requests' cycles wait for the collector"  # the connection's current one may stay
