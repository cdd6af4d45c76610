"""Route of a model's inferred shapes: `GET /models/{id}/shapes`.

The types the `shape` stage inferred, at import, for the main graph's values
the model does not declare (`service.checks.stages.inferred_types`),
as kept in the model's catalogue (`service.store.catalog_shapes`): what the
explorer draws on the edges the model leaves without a type. An empty list
when the import did not run `shape`, or inference gave nothing. One query of
the catalogue; the list is served as stored.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from service.access.callers import ReadCaller
from service.api.dependencies import ImportsDep
from service.api.openapi import problem_responses
from service.api.routes.models import require_model
from service.api.routes.tensors import catalog_errors, catalog_of
from service.api.schemas import ShapesDocument

router = APIRouter(tags=["models"])
SHAPES_FORMAT = "onnx-service-shapes/1"


@router.api_route(
    "/models/{model_id}/shapes",
    methods=["GET", "HEAD"],
    response_model=ShapesDocument,
    summary="The types the shape stage inferred for the values the model does not declare",
    responses=problem_responses(401, 403, 404),
)
def get_shapes(model_id: str, parts: ImportsDep, caller: ReadCaller) -> Response:
    # a plain def: FastAPI runs it in a worker thread (one SQLite query)
    require_model(parts.store, caller.tenant, model_id)
    with catalog_errors():
        values = catalog_of(parts, model_id, caller.tenant).inferred_types()
    return Response(f'{{"format":"{SHAPES_FORMAT}","values":{values}}}'.encode(), media_type="application/json")
