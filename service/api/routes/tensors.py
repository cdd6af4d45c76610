"""Routes of the tensors resource: the paged list and one tensor's bytes.

`GET /models/{id}/tensors` pages through the catalogue in file order
(`limit`, an opaque `cursor`, a name `prefix`). `GET /models/{id}/tensors/{name}`
takes the tensor's ONNX name percent-encoded as one path segment (any
characters: `/` as `%2F`, and the empty name as nothing after the slash; the
server decodes the path once, so `%252F` is the name `%2F`), or its URL-safe
alias. A name several tensors share answers 409 with the candidates;
`?field_path=` picks one exactly. Each lookup is one indexed query of the
model's catalogue (kept open), run by `ImportParts.read`: on the event loop for a
store on this machine, in a worker thread for a fleet's; the bytes are served
by `service.api.tensor_responses` (the file kept open, `OpenFiles`).

A tensor GET is one call of the store, `Store.open_tensor`, which keeps the
reads consistent: a model removed while a read runs (a DELETE, an eviction,
another replica, between the record's lookup and the catalogue's or the
file's) is 404 not-found (on a fleet, an object deleted before its bytes are
fetched: 410 tensor-source-gone); one deleted and imported again meanwhile
(the same id, the same bytes in a new copy at a place of its own) is read
from the copy its record names now, not refused as gone or changed.

The server decodes a path and a query with replacement characters, so `%FF`
would be the name U+FFFD: here the raw path and query must percent-decode to
UTF-8, each `%` followed by two hex digits, else 400. A name may hold any
character, NUL too, and so may a `prefix`.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Annotated
from urllib.parse import unquote_to_bytes

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from service.access.callers import ReadCaller, authorize
from service.api.dependencies import ImportsDep, get_service
from service.api.direct_route import DirectRoute
from service.api.openapi import problem_responses
from service.api.paging import page_of, seq_after
from service.api.problems import ProblemError
from service.api.request_context import current_request
from service.api.routes.models import MAX_PAGE, require_model
from service.api.schemas import PageLinks, TensorEntry, TensorPage
from service.api.tensor_responses import tensor_response
from service.errors import MODEL_GONE, bounded
from service.imports.parts import ImportParts
from service.store.catalog import Catalog, CatalogUnavailable
from service.tasks.catalog_format import TensorRow, npy_href, tensor_href

router = APIRouter(tags=["tensors"])
MAX_CANDIDATES = 100
BAD_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")


def require_utf8(raw: object, what: str) -> None:
    """400 unless `raw` (the request's raw path or query) percent-decodes to UTF-8."""
    if not isinstance(raw, bytes):
        return
    if BAD_ESCAPE.search(raw):
        raise ProblemError("bad-request", f"the {what} has a '%' not followed by two hex digits (a '%' itself is sent as %25)")
    try:
        unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError as error:
        raise ProblemError("bad-request", f"the {what}, percent-decoded, is not UTF-8 ({error.reason})") from None


def entry_of(model_id: str, row: TensorRow) -> TensorEntry:
    href = tensor_href(model_id, row.name, row.field_path, row.shared)
    return TensorEntry(
        name=row.name,
        alias=row.alias,
        field_path=row.field_path,
        role=row.role,
        elem_type=row.elem_type,
        dims=row.dims,
        byte_length=row.byte_length,
        source=row.source,
        href=href,
        npy_href=npy_href(href, row.elem_type),
    )


@router.api_route(
    "/models/{model_id}/tensors",
    methods=["GET", "HEAD"],
    response_model=TensorPage,
    summary="Every tensor of a model, in file order, paged",
    responses=problem_responses(400, 401, 403, 404, 422),
)
async def list_tensors(
    request: Request,
    model_id: str,
    parts: ImportsDep,
    caller: ReadCaller,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[str | None, Query(max_length=1024)] = None,
    prefix: Annotated[str, Query(max_length=4096, description="only tensors whose name starts with this")] = "",
) -> TensorPage:
    require_utf8(request.scope.get("query_string"), "query")
    after = seq_after("tensors", cursor)

    def rows_of_page() -> list[TensorRow]:
        require_model(parts.store, caller.tenant, model_id)
        with catalog_errors():
            return catalog_of(parts, model_id, caller.tenant).page(after, limit + 1, prefix)

    rows = await parts.read(rows_of_page)
    page = page_of(rows, limit, "tensors", lambda row: (row.seq,), f"/models/{model_id}/tensors", prefix=prefix)
    items = [entry_of(model_id, row) for row in page.items]
    return TensorPage(items=items, next_cursor=page.next_cursor, links=PageLinks(next=page.next_link))


def find_tensor(catalog: Catalog, model_id: str, name: str, field_path: str | None) -> TensorRow:
    """The one tensor `name` (and `field_path`, if given) means in the model's catalogue; else 404 or 409."""
    if field_path is not None:
        row = catalog.by_field_path(field_path)
        if row is None or name not in (row.name, row.alias):
            raise ProblemError(
                "not-found", f"model {model_id[:12]}... has no tensor {bounded(repr(name), 120)} at {bounded(field_path, 200)}"
            )
        return row
    rows = catalog.by_name(name, MAX_CANDIDATES)
    if len(rows) == 1:
        return rows[0]
    if rows:
        candidates = [{"field_path": r.field_path, "href": tensor_href(model_id, r.name, r.field_path, r.shared)} for r in rows]
        raise ProblemError(
            "ambiguous-tensor-name",
            f"{rows[0].shared} tensors are named {bounded(repr(name), 120)}; choose one with ?field_path=",
            candidates=candidates,
            candidate_count=rows[0].shared,
        )
    row = catalog.by_alias(name)
    if row is None:
        raise ProblemError("not-found", f"model {model_id[:12]}... has no tensor {bounded(repr(name), 120)}")
    return row


FORMATS = ("raw", "npy")
MAX_FIELD_PATH = 4096
# The parameters, as FastAPI would have declared them: the handler reads them itself (below).
TENSOR_PARAMETERS = [
    {"name": "model_id", "in": "path", "required": True, "schema": {"type": "string", "title": "Model Id"}},
    {"name": "name", "in": "path", "required": True, "schema": {"type": "string", "title": "Name"}},
    {
        "name": "format",
        "in": "query",
        "required": False,
        "schema": {"type": "string", "enum": list(FORMATS), "default": "raw", "title": "Format"},
    },
    {
        "name": "field_path",
        "in": "query",
        "required": False,
        "schema": {"type": "string", "maxLength": MAX_FIELD_PATH, "title": "Field Path"},
    },
]


def tensor_query(request: Request) -> tuple[str, str | None]:
    """`format` and `field_path` from the query string; 422 as FastAPI's own
    validation answers (`service.api.problems`) for a value out of bounds."""
    raw = request.scope.get("query_string")
    if not raw:
        return "raw", None
    require_utf8(raw, "query")
    query = request.query_params
    fmt, field_path = query.get("format", "raw"), query.get("field_path")
    problems = []
    if fmt not in FORMATS:
        problems.append({"type": "literal_error", "loc": ("query", "format"), "msg": "Input should be 'raw' or 'npy'", "input": fmt})
    if field_path is not None and len(field_path) > MAX_FIELD_PATH:
        message = f"String should have at most {MAX_FIELD_PATH} characters"
        problems.append({"type": "string_too_long", "loc": ("query", "field_path"), "msg": message, "input": field_path})
    if problems:
        raise RequestValidationError(problems)
    return fmt, field_path


async def get_tensor(request: Request) -> Response:
    """The route's one entry (a `DirectRoute`): the service, the caller, the
    path and the query are read here, not solved by FastAPI per request."""
    model_id, name = request.path_params["model_id"], request.path_params["name"]
    service = await get_service(request)
    caller = await authorize(request, service, "read")
    fmt, field_path = tensor_query(request)
    require_utf8(request.scope.get("raw_path"), "path")
    parts = service.imports
    return await parts.read(lambda: tensor_of(request, parts, caller.tenant, model_id, name, field_path, fmt))


router.add_api_route(
    "/models/{model_id}/tensors/{name:path}",
    get_tensor,
    methods=["GET", "HEAD"],
    summary="A tensor's values (raw layout, or .npy with format=npy); Range supported",
    response_class=Response,
    responses={
        200: {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}, "description": "the bytes"},
        206: {"description": "the requested range"},
        304: {"description": "not modified (If-None-Match)"},
        **problem_responses(400, 401, 403, 404, 409, 410, 415, 416, 422),
    },
    openapi_extra={"parameters": TENSOR_PARAMETERS},
    route_class_override=DirectRoute,
)


def tensor_of(request: Request, parts: ImportParts, tenant: str, model_id: str, name: str, field_path: str | None, fmt: str) -> Response:
    """The tensor's response: its lookup and its file, found consistently by
    the store (`Store.open_tensor`), a small tensor read (`ImportParts.read` runs it)."""
    found = parts.store.open_tensor(tenant, model_id, lambda catalog: find_tensor(catalog, model_id, name, field_path), parts.data_root)
    if (info := current_request()) is not None:
        info.model_id = model_id
    return tensor_response(request, model_id, found.row, found.source, fmt)


def catalog_of(parts: ImportParts, model_id: str, tenant: str) -> Catalog:
    return parts.store.catalog(model_id, tenant)


@contextlib.contextmanager
def catalog_errors() -> Iterator[None]:
    """A catalogue that went away between the existence check and the query: 404."""
    try:
        yield
    except CatalogUnavailable:
        raise ProblemError("not-found", MODEL_GONE) from None
