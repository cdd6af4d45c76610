"""Route of the diagnostics resource: the operator-schema check's findings.

`GET /models/{id}/diagnostics` pages through every diagnostic the worker's
check (`importer.check_model`) found at import, in file order, each with its
severity, stable code, message, node, field path and byte offset;
`severity=error` or `warning` keeps one kind. One indexed query of the
model's catalogue per page.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from service.access.callers import ReadCaller
from service.http.openapi import problem_responses
from service.http.paging import page_of, seq_after
from service.http.routes.models import MAX_PAGE, require_model
from service.http.routes.tensors import catalog_errors, catalog_of
from service.http.schemas import DiagnosticEntry, DiagnosticPage, PageLinks
from service.state import ServiceDep

router = APIRouter(tags=["diagnostics"])


@router.api_route(
    "/models/{model_id}/diagnostics",
    methods=["GET", "HEAD"],
    response_model=DiagnosticPage,
    summary="The operator-schema check's findings, each with its place, in file order, paged",
    responses=problem_responses(400, 401, 403, 404, 422),
)
def list_diagnostics(
    model_id: str,
    service: ServiceDep,
    caller: ReadCaller,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[str | None, Query(max_length=1024)] = None,
    severity: Literal["error", "warning"] | None = None,
) -> DiagnosticPage:
    # a plain def: FastAPI runs it in a worker thread (an SQLite query)
    require_model(service, caller.tenant, model_id)
    after = seq_after("diagnostics", cursor)
    with catalog_errors():
        rows = catalog_of(service, model_id, caller.tenant).diagnostics(after, limit + 1, severity)
    page = page_of(
        rows, limit, "diagnostics", lambda row: (int(str(row["seq"])),), f"/models/{model_id}/diagnostics", severity=severity or ""
    )
    items = [DiagnosticEntry.model_validate({k: v for k, v in row.items() if k != "seq"}) for row in page.items]
    return DiagnosticPage(items=items, next_cursor=page.next_cursor, links=PageLinks(next=page.next_link))
