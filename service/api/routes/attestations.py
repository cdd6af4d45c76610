"""Route of a model's attestation: `GET /models/{id}/attestation`.

The caller's tenant's latest attestation of the model (`service.attestation`:
a Sigstore bundle holding a DSSE envelope over an in-toto Statement whose
predicate is a SLSA Verification Summary), as the store keeps it
(`Store.attestation`), under its media type
`application/vnd.dev.sigstore.bundle.v0.3+json`. Another tenant's model,
a model without one (checked before the service signed) or a service that
signs nothing (no `--signing-key`) is a 404 problem saying which.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from service.access.callers import ReadCaller
from service.api.dependencies import ImportsDep
from service.api.openapi import problem_responses
from service.api.problems import ProblemError
from service.api.routes.models import require_model
from service.attestation.bundle import BUNDLE_MEDIA_TYPE

router = APIRouter(tags=["attestations"])


@router.api_route(
    "/models/{model_id}/attestation",
    methods=["GET", "HEAD"],
    summary="The latest signed attestation of the model's check run (a Sigstore bundle: docs/attestations.md)",
    response_class=Response,
    responses={200: {"content": {BUNDLE_MEDIA_TYPE: {"schema": {"type": "object"}}}}, **problem_responses(401, 403, 404)},
)
def get_attestation(model_id: str, parts: ImportsDep, caller: ReadCaller) -> Response:
    # a plain def: FastAPI runs it in a worker thread (an index query)
    require_model(parts.store, caller.tenant, model_id)
    bundle = parts.store.attestation(caller.tenant, model_id)
    if bundle is None:
        if parts.attester is None:
            raise ProblemError("not-found", "this service signs no attestations: it was started without --signing-key")
        raise ProblemError("not-found", "no attestation of this model yet: it was checked before the service signed; check it again")
    return Response(bundle, media_type=BUNDLE_MEDIA_TYPE)
