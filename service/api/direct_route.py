"""`DirectRoute`: a route whose endpoint takes the request and reads it itself.

FastAPI solves a route's dependencies and validates its parameters on every
request; for a small tensor's GET that cost more than the read itself
(measured with bench/tensor_get_cpu_bench.py: bench/README.md, "One entry
point per route"). A `DirectRoute` hands the request straight to its
endpoint, `endpoint(request) -> Response`, which reads its path parameters,
caller and query itself and raises what FastAPI would (a
`RequestValidationError` for a query out of bounds). FastAPI still lists
the route in the OpenAPI document; its parameters are declared there with
`openapi_extra`. Errors reach the app's problem handlers as from any route.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from fastapi.routing import APIRoute


class DirectRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        endpoint: Callable[[Request], Coroutine[Any, Any, Response]] = self.endpoint
        return endpoint
