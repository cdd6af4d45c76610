"""Route of the report links: `GET /links/{token}`, one report for whoever holds the link.

The link is its own credential (`service.imports.report_links`: signed by
the service, read-only, expiring), so the route takes no API key. It
answers the one report the link names, as the link's tenant sees it: the
SARIF report of its models (one run per model; one model: the document
`GET /models/{id}/diagnostics?format=sarif` gives,
`service.api.routes.diagnostics.sarif_response`), or the comparison of its
two (the page `GET /models/{a}/diff/{b}` gives, `limit` and `cursor` as
there, the next page's link under this link:
`service.api.routes.diff.diff_response`; it runs in a worker in an import
place of the link's tenant, within that tenant's bounds). Nothing else of
the models: their summaries, tensors and graphs stay behind the tenant's
keys. A changed, cut or expired link is a 403 (`link-refused`,
`link-expired`): the route is there for any token, so a 404 would hide
nothing, and it keeps 404 for what it means elsewhere: a model the tenant
no longer holds. Responses are not to be kept by shared caches, and send
no referrer (`LINK_HEADERS`): the URL is the credential.
"""

from __future__ import annotations

from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from service.api.dependencies import DiffsDep, ImportsDep
from service.api.openapi import problem_responses
from service.api.paging import seq_after
from service.api.request_context import current_request
from service.api.routes.diagnostics import SARIF_MEDIA_TYPE, sarif_response
from service.api.routes.diff import MAX_PAGE, diff_response

router = APIRouter(tags=["links"])
LINK_HEADERS = {"Cache-Control": "private, no-store", "Referrer-Policy": "no-referrer"}


@router.api_route(
    "/links/{token}",
    methods=["GET", "HEAD"],
    summary="The one report a link the service made names (its SARIF, or a comparison), with no API key, until it expires",
    responses={
        200: {"content": {SARIF_MEDIA_TYPE: {}, "application/json": {}}, "description": "the SARIF report, or a page of the comparison"},
        **problem_responses(400, 403, 404, 422, 503),
    },
)
async def open_link(
    token: str,
    request: Request,
    parts: ImportsDep,
    diffs: DiffsDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[str | None, Query(max_length=1024)] = None,
) -> Response:
    link = parts.links.opened(token)  # LinkRefused, LinkExpired: 403
    info = current_request()
    if info is not None:
        info.tenant = link.tenant  # the access log names whose report was read
    if link.kind == "sarif":
        answer = await anyio.to_thread.run_sync(sarif_response, parts, link.tenant, link.model_ids)
    else:
        before, after = link.model_ids
        answer = await diff_response(request, parts, diffs, link.tenant, before, after, seq_after("diff", cursor), limit, f"/links/{token}")
    answer.headers.update(LINK_HEADERS)
    return answer
