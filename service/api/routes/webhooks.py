"""Webhooks of model registries: `POST /hooks/mlflow` (on with `--mlflow-url`) and `POST /hooks/oci` (on with `--oci-registry`).

Reads the delivery (at most 64 KiB), has the hook check its signature and
timestamp (401 otherwise, nothing changed) and mark its delivery id in
the shared index (a replay, to this replica or any other, answers 200 and
validates nothing), then parses the payload: a
`model_version` `created` event starts the version's validation in the
background and answers 202 at once; any other signed event answers 200,
ignored. The validation and its write-back are `service.registry`'s.

`POST /hooks/oci` takes a CNCF distribution registry's notification
envelope (at most 64 KiB): its bearer token first (401 otherwise), then each
manifest push is marked in the shared index (a replay answers 200 and runs
nothing) and validated in the background (202 when any is); a malformed
event is skipped with its reason, never a refusal of the whole envelope
(the registry would send it again and again).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from service.api.dependencies import ImportsDep
from service.api.openapi import problem_responses
from service.api.problems import ProblemError
from service.api.request_body import MAX_JSON_BODY, small_body
from service.registry.hook import RegistryHook
from service.registry.oci_hook import BadEnvelope, OciHook, pushed_manifests
from service.registry.signature import Unsigned

router = APIRouter(tags=["hooks"])


def _version_of(body: bytes) -> tuple[str, str] | None:
    """(name, version) of a model_version.created payload; None for another event; 400 if malformed."""
    try:
        payload = json.loads(body)
    except ValueError:
        raise ProblemError("bad-request", "the delivery's body is not JSON") from None
    if not isinstance(payload, dict):
        raise ProblemError("bad-request", "the delivery's body is not a JSON object")
    if (payload.get("entity"), payload.get("action")) != ("model_version", "created"):
        return None
    data: Any = payload.get("data")
    if not isinstance(data, dict):
        raise ProblemError("bad-request", "the delivery's data is not a JSON object")
    name, version = data.get("name"), data.get("version")
    if not isinstance(name, str) or not name or len(name) > 500:
        raise ProblemError("bad-request", "data.name is not a registered model's name")
    if isinstance(version, int) and not isinstance(version, bool):
        version = str(version)
    if not isinstance(version, str) or not version.isdigit() or len(version) > 18:
        raise ProblemError("bad-request", "data.version is not a version number")
    return name, version


@router.post(
    "/hooks/mlflow",
    status_code=202,
    summary="An MLflow model-registry webhook delivery (docs/registry.md)",
    responses={
        200: {"description": "a delivery taken already (a replay), or an event the hook does not validate"},
        **problem_responses(400, 401, 404, 413),
    },
)
async def mlflow_hook(request: Request, parts: ImportsDep) -> JSONResponse:
    hook: RegistryHook | None = getattr(request.app.state, "registry_hook", None)
    if hook is None:
        raise ProblemError("not-found", "the MLflow hook is off (--mlflow-url)")
    if (body := await small_body(request, parts.settings.body_timeout)) is None:
        raise ProblemError("payload-too-large", f"a delivery is at most {MAX_JSON_BODY} bytes")
    headers = request.headers
    try:
        first = await hook.take(
            headers.get("x-mlflow-delivery-id"), headers.get("x-mlflow-timestamp"), headers.get("x-mlflow-signature"), body
        )
    except Unsigned as error:
        raise ProblemError("unauthorized", f"not a delivery of the MLflow webhook: {error}") from None
    if not first:
        return JSONResponse({"status": "duplicate", "detail": "this delivery was taken already"}, status_code=200)
    version = _version_of(body)
    if version is None:
        return JSONResponse({"status": "ignored", "detail": "only model_version.created events are validated"}, status_code=200)
    hook.start(*version)
    return JSONResponse({"status": "accepted", "name": version[0], "version": version[1]}, status_code=202)


@router.post(
    "/hooks/oci",
    status_code=202,
    summary="An OCI registry's notification envelope (docs/registry.md, OCI registries)",
    responses={
        200: {"description": "no manifest push to validate: replays, or events the hook does not validate"},
        **problem_responses(400, 401, 404, 413),
    },
)
async def oci_hook(request: Request, parts: ImportsDep) -> JSONResponse:
    hook: OciHook | None = getattr(request.app.state, "oci_hook", None)
    if hook is None:
        raise ProblemError("not-found", "the OCI hook is off (--oci-registry)")
    try:
        hook.authorize(request.headers.get("authorization"))
    except Unsigned as error:
        raise ProblemError("unauthorized", f"not a notification of the OCI registry: {error}") from None
    if (body := await small_body(request, parts.settings.body_timeout)) is None:
        raise ProblemError("payload-too-large", f"a notification is at most {MAX_JSON_BODY} bytes")
    try:
        pushes, skipped = pushed_manifests(json.loads(body))
    except ValueError:
        raise ProblemError("bad-request", "the notification's body is not JSON") from None
    except BadEnvelope as error:
        raise ProblemError("bad-request", str(error)) from None
    accepted, duplicates = [], 0
    for pushed in pushes:
        if await hook.take(pushed):
            hook.start(pushed)
            accepted.append({"repository": pushed.repository, "digest": pushed.digest})
        else:
            duplicates += 1
    answer = {"status": "accepted" if accepted else "ignored", "accepted": accepted, "duplicates": duplicates, "skipped": skipped}
    return JSONResponse(answer, status_code=202 if accepted else 200)
