"""Routes of the models resource: import, list, summary, graph, delete.

`POST /models` (an upload or a data-root path; `service.import_flow`),
`GET /models` (this store's models, newest first, paged), `GET /models/{id}`
(the bounded summary, a file served as is), `GET /models/{id}/graph` (the
resolved graph, rendered on first request; `service.graph_flow`) and
`DELETE /models/{id}` (the record and the bytes the store copied; nothing
under the data root). Every GET also answers HEAD.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, Response

from service.cursors import decode_cursor, encode_cursor
from service.graph_flow import graph_document
from service.import_flow import import_path, import_upload, store_space
from service.models import GraphDocument, ModelFile, ModelListItem, ModelPage, ModelSummary, PageLinks, PathRequest
from service.openapi_doc import problem_responses
from service.problems import ProblemError, bounded
from service.state import Service, ServiceDep

router = APIRouter(tags=["models"])
MAX_PAGE = 1000

UPLOAD_BODY = {
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
                    },
                }
            },
            "application/json": {"schema": PathRequest.model_json_schema()},
        },
    }
}


def require_model(service: Service, model_id: str) -> None:
    """404 unless stored (a stat, not a parse)."""
    if not service.store.has(model_id):
        raise ProblemError("not-found", f"no model {bounded(repr(model_id), 80)}")


@router.post(
    "/models",
    status_code=201,
    response_model=ModelSummary,
    summary="Import a model (multipart upload, or JSON path under the data root)",
    openapi_extra=UPLOAD_BODY,
    responses={
        200: {"model": ModelSummary, "description": "the same model was imported before (same id)"},
        201: {"description": "imported; Location: /models/{id}"},
        **problem_responses(400, 403, 404, 408, 409, 413, 415, 422, 500, 503, 507),
    },
)
async def post_model(request: Request, service: ServiceDep) -> Response:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type not in ("multipart/form-data", "application/json"):
        raise ProblemError("unsupported-media-type", 'send multipart/form-data (an upload) or application/json ({"path": ...})')
    with store_space(), service.store.work_folder() as work:
        if media_type == "multipart/form-data":
            return await import_upload(request, service, work)
        return await import_path(request, service, work)


@router.api_route(
    "/models",
    methods=["GET", "HEAD"],
    response_model=ModelPage,
    summary="The models in this store, newest first",
    responses=problem_responses(400, 422),
)
def list_models(
    service: ServiceDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[str | None, Query(max_length=1024)] = None,
) -> ModelPage:
    # a plain def: FastAPI runs it in a worker thread (a directory scan)
    before = None
    if cursor is not None:
        committed, model_id = decode_cursor("models", cursor, (int, str))
        before = (int(committed), str(model_id))
    found = service.store.list_models(before, limit + 1)
    page = found[:limit]
    items = []
    for committed_ns, model_id in page:
        record = service.store.read_record(model_id)
        if record is None:  # deleted meanwhile
            continue
        items.append(
            ModelListItem(
                id=model_id,
                input=record.input,
                created=datetime.fromtimestamp(committed_ns / 1e9, UTC).isoformat().replace("+00:00", "Z"),
                model_file=ModelFile(size=record.model_size, sha256=record.model_sha256),
                tensor_count=record.tensor_count,
                href=f"/models/{model_id}",
            )
        )
    next_cursor = encode_cursor("models", *page[-1]) if len(found) > limit else None
    return ModelPage(
        items=items, next_cursor=next_cursor, links=PageLinks(next=f"/models?limit={limit}&cursor={next_cursor}" if next_cursor else None)
    )


@router.api_route(
    "/models/{model_id}",
    methods=["GET", "HEAD"],
    response_model=ModelSummary,
    summary="The summary of an imported model (bounded; tensors are paged from /tensors)",
    responses=problem_responses(404),
)
async def get_model(model_id: str, service: ServiceDep) -> Response:
    require_model(service, model_id)
    service.store.touch(model_id)
    return FileResponse(service.store.folder(model_id).summary, media_type="application/json")


@router.api_route(
    "/models/{model_id}/graph",
    methods=["GET", "HEAD"],
    response_model=GraphDocument,
    summary="The full resolved graph (rendered by a worker on first request)",
    responses=problem_responses(404, 409, 422, 503),
)
async def get_graph(model_id: str, service: ServiceDep) -> Response:
    require_model(service, model_id)
    service.store.touch(model_id)
    path = await graph_document(service, model_id)
    return FileResponse(path, media_type="application/json")


@router.delete(
    "/models/{model_id}",
    status_code=204,
    response_class=Response,
    summary="Remove a model: its record and the bytes the store copied (never files under the data root)",
    responses=problem_responses(404),
)
async def delete_model(model_id: str, service: ServiceDep) -> Response:
    require_model(service, model_id)
    service.catalogs.forget(service.store.folder(model_id).catalog)
    if not await anyio.to_thread.run_sync(service.store.delete, model_id):
        raise ProblemError("not-found", f"no model {bounded(repr(model_id), 80)}")
    return Response(status_code=204)
