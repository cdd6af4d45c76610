"""The comparison of two models: `GET /models/{a}/diff/{b}`.

Both models must be ones the caller may read (either missing, or another
tenant's, is a 404 naming it). The answer is the comparison's head
(opsets, domains, inputs, outputs, op-type counts, how many nodes and
initializers were added, removed or changed) and one page of the changes
themselves, nodes then initializers, `limit` at a time with an opaque
cursor to the next page. The comparison runs in a sandboxed worker, once,
and its changes are read from where it is kept, never parsed here
(`service.imports.diffs`, `service.tasks.model_diff`); a client that leaves while
it waits ends its wait (`service.api.client_presence`). A report link to a
comparison answers the same page (`diff_response`, `service.api.routes.links`).
"""

from __future__ import annotations

import json
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from service.access.callers import ReadCaller
from service.api.client_presence import while_client_waits
from service.api.dependencies import DiffsDep, ImportsDep
from service.api.openapi import problem_responses
from service.api.paging import page_of, seq_after
from service.api.routes.models import require_model
from service.api.schemas import ModelDiffPage
from service.imports.diffs import Diffs
from service.imports.parts import ImportParts

router = APIRouter(tags=["models"])
MAX_PAGE = 1000


@router.api_route(
    "/models/{a}/diff/{b}",
    methods=["GET", "HEAD"],
    response_model=ModelDiffPage,
    summary="What changed from model a to model b: opsets, inputs, outputs, op types, and the changed nodes and initializers, paged",
    responses=problem_responses(400, 401, 403, 404, 409, 422, 503),
)
async def get_diff(
    a: str,
    b: str,
    request: Request,
    parts: ImportsDep,
    diffs: DiffsDep,
    caller: ReadCaller,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[str | None, Query(max_length=1024)] = None,
) -> Response:
    return await diff_response(request, parts, diffs, caller.tenant, a, b, seq_after("diff", cursor), limit, f"/models/{a}/diff/{b}")


async def diff_response(
    request: Request, parts: ImportParts, diffs: Diffs, tenant: str, a: str, b: str, after: int, limit: int, path: str
) -> Response:
    """The page of the tenant's comparison of `a` with `b` after change `after`,
    its next page's link under `path` (NotFound for a model the tenant does not hold)."""
    for model_id in (a, b):
        await anyio.to_thread.run_sync(require_model, parts.store, tenant, model_id)
    compared = await while_client_waits(request, lambda: diffs.compare(parts, tenant, a, b))
    changes = await anyio.to_thread.run_sync(compared.page, after + 1, limit + 1)
    numbered = list(enumerate(changes, start=after + 1))
    page = page_of(numbered, limit, "diff", lambda item: (item[0],), path)
    tail = {"next_cursor": page.next_cursor, "links": {"next": page.next_link}}
    head = json.dumps(compared.head, allow_nan=False, separators=(",", ":"))
    body = head[:-1].encode() + b',"changes":[' + b",".join(change for _, change in page.items) + b"]," + _dumped(tail)[1:]
    return Response(body, media_type="application/json")


def _dumped(value: object) -> bytes:
    return json.dumps(value, allow_nan=False, separators=(",", ":")).encode()
