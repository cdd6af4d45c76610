"""Routes of the models resource: import, list, summary, checks, graph, delete.

`POST /models` (an upload, a data-root path, or finished resumable uploads:
each a source of the import pipeline, `service.imports.pipeline`, run while
its client waits, `service.api.client_presence`; the check stages of
`?checks=` and the smoke run's `?dim=` bindings, `service.checks.requested`),
`GET /models` (this store's models, newest first, paged, each with the
name and label the caller gave it, its verdict and the stages that verdict
covers), `GET /models/{id}`
(the bounded summary, with this tenant's own check runs),
`POST /models/{id}/checks` (stages run again on the stored model for this
tenant: the pipeline on a `StoredModel`), `GET /models/{id}/graph` (the
resolved graph, rendered on first request, `service.imports.graph_render`; kept
gzip-compressed, `service.api.graph_responses`) and
`DELETE /models/{id}` (the record and the bytes the store copied; nothing
under the data root). Every GET also answers HEAD.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from service.access.callers import DeleteCaller, ImportCaller, ReadCaller
from service.api.client_presence import while_client_waits
from service.api.dependencies import ImportsDep, MetricsDep, UploadsDep
from service.api.graph_responses import graph_response
from service.api.openapi import problem_responses
from service.api.paging import decode_cursor, page_of
from service.api.problems import ProblemError, known_problem
from service.api.request_body import read_json
from service.api.request_context import current_request
from service.api.schemas import GraphDocument, ImportRequest, ModelFile, ModelListItem, ModelPage, ModelSummary, PageLinks
from service.api.upload_body import multipart_source, refused_unread
from service.checks.outcome import ChecksError, parse_checks, parse_dims
from service.checks.requested import CheckRequest
from service.checks.runs import CheckRuns
from service.errors import DomainError, bounded
from service.imports import pipeline
from service.imports.answers import Imported, stored_summary
from service.imports.graph_render import graph_document
from service.imports.naming import MAX_LABEL, MAX_NAME, naming_of
from service.imports.sources import Source, under_data_root
from service.imports.sources.finished_uploads import ResumableUploadsSource
from service.imports.sources.stored import StoredModel
from service.settings import Settings
from service.store.model_store import Store

router = APIRouter(tags=["models"])
audit = logging.getLogger("service.audit")
MAX_PAGE = 1000

UPLOAD_BODY = {
    "parameters": [
        {
            "name": "checks",
            "in": "query",
            "required": False,
            "style": "form",
            "explode": True,
            "schema": {"type": "array", "items": {"type": "string"}},
            "description": "check stages, comma-separated or repeated: schema, security, shape, runtime, smoke "
            "(default: --default-checks; smoke brings runtime)",
        },
        {
            "name": "dim",
            "in": "query",
            "required": False,
            "style": "form",
            "explode": True,
            "schema": {"type": "array", "items": {"type": "string", "pattern": "^.+:[0-9]+$"}},
            "description": "NAME:VALUE, a symbolic dimension's value for the smoke run (unbound ones are 1)",
        },
    ],
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["model"],
                    "properties": {
                        "model": {"type": "string", "format": "binary", "description": "the .onnx file"},
                        "external_data": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "description": "external data files; each part's file name is the location the model names",
                        },
                        "name": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": MAX_NAME,
                            "description": "the model's display name (its `input`) instead of the model part's file name; printable",
                        },
                        "label": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": MAX_LABEL,
                            "description": 'a free short label, e.g. "v3 fp16"; printable',
                        },
                    },
                }
            },
            "application/json": {"schema": ImportRequest.model_json_schema()},
        },
    },
}


def check_request(request: Request, settings: Settings) -> CheckRequest:
    """`?checks=schema,shape` (repeatable; default `--default-checks`) and `?dim=NAME:VALUE` (repeatable)."""
    asked = request.query_params.getlist("checks")
    bindings = request.query_params.getlist("dim")
    if len(asked) > 16 or len(bindings) > 256:
        raise ProblemError("bad-request", "too many checks or dim parameters")
    try:
        return CheckRequest(parse_checks(asked or settings.default_checks), parse_dims(bindings))
    except ChecksError as error:
        raise ProblemError("bad-request", bounded(str(error), 300)) from None


def verdict_of(runs: bytes | None) -> str | None:
    """The verdict over a tenant's check runs of a model (None: it has none)."""
    found = CheckRuns.from_bytes(runs)
    return None if found is None else found.verdict()


def stages_of(runs: bytes | None) -> dict[str, str]:
    """Each stage of a tenant's check runs of a model, in run order, with its status (empty: it has none)."""
    found = CheckRuns.from_bytes(runs)
    return {} if found is None else {result.stage: result.status for result in found.results()}


def require_model(store: Store, tenant: str, model_id: str) -> None:
    """404 unless the tenant holds the model and it is stored (one lookup, no
    parse); another tenant's model is a 404 like a missing one."""
    if not store.visible(tenant, model_id):
        raise ProblemError("not-found", f"no model {bounded(repr(model_id), 80)}")
    if (info := current_request()) is not None:
        info.model_id = model_id


@router.post(
    "/models",
    status_code=201,
    response_model=ModelSummary,
    summary="Import a model (multipart upload; or JSON: a path under the data root, or finished resumable uploads)",
    openapi_extra=UPLOAD_BODY,
    responses={
        200: {"model": ModelSummary, "description": "this tenant imported the same model before (same id)"},
        201: {"description": "imported; Location: /models/{id}"},
        **problem_responses(400, 401, 403, 404, 408, 409, 413, 415, 422, 500, 503, 507),
    },
)
async def post_model(request: Request, parts: ImportsDep, uploads: UploadsDep, metrics: MetricsDep, caller: ImportCaller) -> Response:
    started = time.perf_counter()
    result = "internal-error"  # anything not named below
    try:
        try:
            media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if media_type not in ("multipart/form-data", "application/json"):
                raise ProblemError(
                    "unsupported-media-type", 'send multipart/form-data (an upload) or application/json ({"path": ...} or {"upload": ...})'
                )
            checks = check_request(request, parts.settings)
            tenant = caller.tenant
            if media_type == "multipart/form-data":
                source, body = multipart_source(request, parts.settings)
                try:
                    imported = await while_client_waits(request, lambda: pipeline.run(parts, source, tenant, checks), body.read)
                except (DomainError, OSError) as error:
                    if body.read.is_set() or (problem := await refused_unread(error, body)) is None:
                        raise
                    raise problem from None
            else:
                wanted = await read_json(request, ImportRequest, parts.settings.body_timeout)
                naming = naming_of(wanted.name, wanted.label)
                chosen: Source
                if wanted.upload is not None:  # finished resumable uploads (POST /uploads)
                    chosen = ResumableUploadsSource(uploads, tenant, wanted.upload, wanted.external_data or {})
                else:
                    chosen = under_data_root(parts.data_root, wanted.path or "", parts.settings.allow_hard_links)
                imported = await while_client_waits(request, lambda: pipeline.run(parts, chosen, tenant, checks, naming))
        except (DomainError, OSError) as error:
            problem = known_problem(error)
            if problem is None:
                raise
            raise problem from None
        result = "ok"
        return summary_response(imported, 201 if imported.created else 200)
    except ProblemError as error:
        result = str(error.extensions.get("kind") or error.problem.slug)
        raise
    except RequestValidationError:
        result = "validation-error"
        raise
    except ClientDisconnect:
        result = "client-gone"
        raise
    finally:
        metrics.imports.labels(result).inc()
        metrics.import_seconds.observe(time.perf_counter() - started)
        info = current_request()
        model_id = info.model_id if info is not None else None
        audit.info(
            "import by %s: %s (model %s)", caller.tenant, result, model_id,
            extra={"fields": {"event": "import", "tenant": caller.tenant, "outcome": result, "model_id": model_id}},
        )  # fmt: skip


def summary_response(imported: Imported, status: int) -> Response:
    """A model's summary as the answer (its id noted for the request log)."""
    if (info := current_request()) is not None:
        info.model_id = imported.model_id
    headers = {"Location": f"/models/{imported.model_id}"}
    return Response(imported.summary, status_code=status, media_type="application/json", headers=headers)


@router.api_route(
    "/models",
    methods=["GET", "HEAD"],
    response_model=ModelPage,
    summary="The models in this store, newest first",
    responses=problem_responses(400, 401, 403, 422),
)
def list_models(
    parts: ImportsDep,
    caller: ReadCaller,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[str | None, Query(max_length=1024)] = None,
) -> ModelPage:
    # a plain def: FastAPI runs it in a worker thread (a directory scan)
    before = None
    if cursor is not None:
        committed, model_id = decode_cursor("models", cursor, (int, str))
        before = (int(committed), str(model_id))
    found = parts.store.listing(caller.tenant, before, limit + 1)  # each with its records and runs: one query
    page = page_of(found, limit, "models", lambda listed: (listed.created_ns, listed.model_id), "/models")
    items = [
        ModelListItem(
            id=listed.model_id,
            input=listed.holding.input,
            label=listed.holding.label or None,
            created=datetime.fromtimestamp(listed.created_ns / 1e9, UTC).isoformat().replace("+00:00", "Z"),
            model_file=ModelFile(size=listed.record.model_size, sha256=listed.record.model_sha256),
            tensor_count=listed.record.tensor_count,
            verdict=verdict_of(listed.runs),
            stages=stages_of(listed.runs),
            href=f"/models/{listed.model_id}",
        )
        for listed in page.items
    ]
    return ModelPage(items=items, next_cursor=page.next_cursor, links=PageLinks(next=page.next_link))


@router.api_route(
    "/models/{model_id}",
    methods=["GET", "HEAD"],
    response_model=ModelSummary,
    summary="The summary of an imported model (bounded; tensors are paged from /tensors)",
    responses=problem_responses(401, 403, 404),
)
async def get_model(model_id: str, parts: ImportsDep, caller: ReadCaller) -> Response:
    await anyio.to_thread.run_sync(require_model, parts.store, caller.tenant, model_id)  # the index may be a database
    summary = await stored_summary(parts, caller.tenant, model_id)  # under the name the tenant gave it
    return summary_response(Imported(model_id, False, summary), 200)


@router.post(
    "/models/{model_id}/checks",
    response_model=ModelSummary,
    summary="Run check stages on a stored model for this tenant; its summary with the checks and verdict they give",
    openapi_extra={"parameters": UPLOAD_BODY["parameters"]},
    responses=problem_responses(400, 401, 403, 404, 409, 422, 500, 503),
)
async def post_checks(model_id: str, request: Request, parts: ImportsDep, caller: ImportCaller) -> Response:
    checks = check_request(request, parts.settings)
    await anyio.to_thread.run_sync(require_model, parts.store, caller.tenant, model_id)
    source = StoredModel(parts, caller.tenant, model_id)
    try:
        summary = (await while_client_waits(request, lambda: pipeline.run(parts, source, caller.tenant, checks))).summary
    except (DomainError, OSError) as error:
        problem = known_problem(error)
        if problem is None:
            raise
        raise problem from None
    audit.info(
        "checks by %s: %s (model %s)", caller.tenant, ",".join(checks.stages), model_id,
        extra={"fields": {"event": "checks", "tenant": caller.tenant, "stages": list(checks.stages), "model_id": model_id}},
    )  # fmt: skip
    return summary_response(Imported(model_id, False, summary), 200)


@router.api_route(
    "/models/{model_id}/graph",
    methods=["GET", "HEAD"],
    response_model=GraphDocument,
    summary="The full resolved graph (rendered by a worker on first request)",
    responses=problem_responses(401, 403, 404, 409, 422, 503),
)
async def get_graph(model_id: str, request: Request, parts: ImportsDep, caller: ReadCaller) -> Response:
    await anyio.to_thread.run_sync(require_model, parts.store, caller.tenant, model_id)
    await anyio.to_thread.run_sync(parts.store.touch, model_id)
    return graph_response(request, await graph_document(parts, model_id, caller.tenant))


@router.delete(
    "/models/{model_id}",
    status_code=204,
    response_class=Response,
    summary="Remove the caller's model: its record, and the bytes the store copied once no tenant holds them (never data-root files)",
    responses=problem_responses(401, 403, 404),
)
async def delete_model(model_id: str, parts: ImportsDep, caller: DeleteCaller) -> Response:
    await anyio.to_thread.run_sync(require_model, parts.store, caller.tenant, model_id)
    released = await anyio.to_thread.run_sync(parts.store.release, caller.tenant, model_id)
    audit.info(
        "delete by %s: %s (model %s)", caller.tenant, "ok" if released else "not-found", model_id,
        extra={"fields": {"event": "delete", "tenant": caller.tenant, "outcome": "ok" if released else "not-found", "model_id": model_id}},
    )  # fmt: skip
    if not released:
        raise ProblemError("not-found", f"no model {bounded(repr(model_id), 80)}")
    return Response(status_code=204)
