"""Routes of resumable uploads: tus 1.0.0 under `/uploads`.

`OPTIONS /uploads` (what the server speaks), `POST /uploads` (creation: an
empty upload of a declared `Upload-Length`), `HEAD /uploads/{id}` (its
offset), `PATCH /uploads/{id}` (bytes appended at `Upload-Offset`) and
`DELETE /uploads/{id}` (termination); expiration after `--upload-expiry`.
The uploads are stored by `service.store.uploads` (their bytes in the
store's, their state in its index; any process, any replica, continues
any upload) and imported by
`POST /models` with `{"upload": id}` (`service.api.upload_imports`). A
PATCH's body is read as a one-shot upload's is (`body_chunks`: silence and
minimum rate; a receiving place of the import admission, within the tenant's share), written and hashed
in threads while the loop receives (`service.imports.sources.body_pipe`), and whatever
arrived before a disconnect, a timeout or an error is kept. The PATCH that finishes an upload
created with the metadata `part` `model` answers once a worker has checked that model
(`service.imports.model_upload_check`): its refusal is the PATCH's answer. Every route takes the `import` scope;
another tenant's upload is a 404, as a missing one.
"""

from __future__ import annotations

import logging

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import Response

from service.access.callers import ImportCaller
from service.api.dependencies import ImportsDep, UploadsDep
from service.api.openapi import problem_responses
from service.api.problems import ProblemError, known_problem
from service.api.request_body import body_chunks
from service.api.tus import (
    OFFSET_MEDIA_TYPE,
    TUS_EXTENSIONS,
    TUS_VERSION,
    decimal_header,
    http_date,
    parse_metadata,
    require_tus,
)
from service.errors import DomainError, NotFound, bounded
from service.imports.model_upload_check import check_model_upload
from service.imports.sources.body_pipe import BodyPipe
from service.imports.sources.hash_thread import HashThread
from service.store.uploads import Appending
from service.store.writeback import Writeback

router = APIRouter(tags=["uploads"])
audit = logging.getLogger("service.audit")


def _header(name: str, description: str, *, required: bool = True, pattern: str | None = None) -> dict[str, object]:
    schema: dict[str, object] = {"type": "string"}
    if pattern is not None:
        schema["pattern"] = pattern
    return {"name": name, "in": "header", "required": required, "schema": schema, "description": description}


TUS_RESUMABLE = _header("Tus-Resumable", "1.0.0 (else 412, with Tus-Version)", pattern="^1\\.0\\.0$")
CREATION = {
    "parameters": [
        TUS_RESUMABLE,
        _header("Upload-Length", "the upload's size in bytes, decimal; at most --max-upload-total", pattern="^[0-9]+$"),
        _header(
            "Upload-Metadata",
            "comma-separated `key base64value` pairs (at most 4096 characters); `filename` names the model in an import,"
            " or `name` (its display name) and `label` do (each UTF-8, printable, at most 200 and 100 characters);"
            " `part`: `model` (the PATCH that finishes the upload checks the model, and answers its refusal) or `external_data`",
            required=False,
        ),
    ]
}
PATCHING = {
    "parameters": [
        TUS_RESUMABLE,
        _header("Upload-Offset", "the bytes the server holds (HEAD), decimal", pattern="^[0-9]+$"),
    ],
    "requestBody": {"required": True, "content": {OFFSET_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}}},
}
UPLOAD_HEADERS = {"parameters": [TUS_RESUMABLE]}


def _has_body(request: Request) -> bool:
    return request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers


def _problem(error: ProblemError | DomainError | OSError, **headers: str) -> ProblemError:
    """The problem of an error (a domain error, a full disk: their problem), with `headers` added."""
    problem = error if isinstance(error, ProblemError) else known_problem(error)
    if problem is None:
        raise error
    problem.headers.update(headers)
    return problem


@router.options(
    "/uploads",
    status_code=204,
    response_class=Response,
    summary="tus discovery: the protocol version, its extensions and the largest upload (Tus-Max-Size)",
    responses={204: {"description": "Tus-Version, Tus-Extension, Tus-Max-Size"}, **problem_responses(401, 403)},
)
async def uploads_options(parts: ImportsDep, caller: ImportCaller) -> Response:
    headers = {"Tus-Version": TUS_VERSION, "Tus-Extension": TUS_EXTENSIONS, "Tus-Max-Size": str(parts.settings.max_upload_total)}
    return Response(status_code=204, headers=headers)


@router.post(
    "/uploads",
    status_code=201,
    response_class=Response,
    summary="Create a resumable upload of Upload-Length bytes (its space is reserved in the store)",
    openapi_extra=CREATION,
    responses={
        201: {"description": "created, empty: Location: /uploads/{id}, Upload-Expires"},
        **problem_responses(400, 401, 403, 412, 413, 429, 503, 507),
    },
)
async def create_upload(request: Request, parts: ImportsDep, uploads: UploadsDep, caller: ImportCaller) -> Response:
    require_tus(request)
    if "upload-defer-length" in request.headers:
        raise ProblemError("bad-request", "a deferred length is not supported (no creation-defer-length): send Upload-Length")
    length = decimal_header(request, "upload-length")
    limit = parts.settings.max_upload_total
    if length > limit:
        raise ProblemError(
            "payload-too-large", f"Upload-Length {length} is larger than the limit of {limit} bytes", limit="max_upload_total"
        )
    metadata, filename = parse_metadata(request.headers.get("upload-metadata"))
    if _has_body(request):
        raise ProblemError(
            "bad-request",
            "creation with upload is not supported: create with an empty body, then PATCH the bytes",
            headers={"Connection": "close"},
        )
    state = await anyio.to_thread.run_sync(uploads.create, caller.tenant, length, metadata, filename)
    audit.info(
        "upload created by %s: %s (%d bytes)", caller.tenant, state.upload_id, length,
        extra={"fields": {"event": "upload-created", "tenant": caller.tenant, "upload_id": state.upload_id, "length": length}},
    )  # fmt: skip
    headers = {"Location": f"/uploads/{state.upload_id}", "Upload-Expires": http_date(state.expires), "Upload-Offset": "0"}
    return Response(status_code=201, headers=headers)


@router.head(
    "/uploads/{upload_id}",
    status_code=200,
    response_class=Response,
    summary="The upload's offset (the bytes the server holds), length, metadata and expiry",
    openapi_extra=UPLOAD_HEADERS,
    responses={
        200: {"description": "Upload-Offset, Upload-Length, Upload-Metadata, Upload-Expires"},
        **problem_responses(401, 403, 404, 412),
    },
)
async def upload_offset(upload_id: str, request: Request, parts: ImportsDep, uploads: UploadsDep, caller: ImportCaller) -> Response:
    try:
        require_tus(request)
        state = await anyio.to_thread.run_sync(uploads.find, caller.tenant, upload_id)
    except (ProblemError, DomainError) as error:
        raise _problem(error, **{"Cache-Control": "no-store"}) from None
    headers = {
        "Upload-Offset": str(state.offset),
        "Upload-Length": str(state.length),
        "Upload-Expires": http_date(state.expires),
        "Cache-Control": "no-store",
    }
    if state.metadata:
        headers["Upload-Metadata"] = state.metadata
    return Response(status_code=200, headers=headers)


@router.patch(
    "/uploads/{upload_id}",
    status_code=204,
    response_class=Response,
    summary="Append the body to the upload at Upload-Offset (what arrives is kept, even from a request cut short)",
    openapi_extra=PATCHING,
    responses={
        204: {"description": "appended: Upload-Offset (the new offset), Upload-Expires"},
        **problem_responses(400, 401, 403, 404, 408, 409, 412, 413, 415, 422, 503, 507),
    },
)
async def patch_upload(upload_id: str, request: Request, parts: ImportsDep, uploads: UploadsDep, caller: ImportCaller) -> Response:
    settings = parts.settings
    try:  # refused before its body is read: the connection closes after the answer (nobody reads what comes)
        require_tus(request)
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != OFFSET_MEDIA_TYPE:
            raise ProblemError("unsupported-media-type", f"a PATCH sends Content-Type: {OFFSET_MEDIA_TYPE}")
        offset = decimal_header(request, "upload-offset")
        appending = await anyio.to_thread.run_sync(uploads.append, caller.tenant, upload_id, offset)
    except (ProblemError, DomainError, OSError) as error:
        raise _problem(error, **({"Connection": "close"} if _has_body(request) else {})) from None
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > appending.room:
        await anyio.to_thread.run_sync(appending.end)
        raise _past_length(appending, int(declared))
    started = appending.offset
    appender = _Appender(appending)
    pipe = BodyPipe(appender.consume, appender.end)  # written and hashed in threads while the loop receives
    try:
        queued = appending.offset  # bytes consumed or on their way (the thread's consume moves appending.offset)
        async with parts.admission.receiving(caller.tenant):
            async for chunk in body_chunks(request, settings.body_timeout, settings.min_upload_rate):
                piece = chunk[: appending.length - queued]
                if piece:
                    await pipe.feed(piece)
                    queued += len(piece)
                if len(piece) < len(chunk):
                    raise _past_length(appending, None)
    finally:
        await pipe.finish()  # what arrived is kept, whatever ends the request; the thread closes the upload
    if appender.expires is None:
        raise NotFound(f"no upload {bounded(repr(upload_id), 80)}")  # removed (DELETE, expiry) while this request wrote
    if appending.offset == appending.length > started:  # this PATCH finished it: a model upload is checked now
        try:
            await check_model_upload(parts, uploads, caller.tenant, upload_id)
        except (DomainError, OSError) as error:
            raise _problem(error) from None
    return Response(status_code=204, headers={"Upload-Offset": str(appending.offset), "Upload-Expires": http_date(appender.expires)})


class _Appender:
    """A PATCH's body, in the pipe's thread: handed to the upload's own
    `consume` (appended to a file, or buffered into the parts of a multipart
    upload), its digest (when this process has it) computed in a second
    thread, writeback of a file started as it goes; at the end the upload's
    `end` runs there, so its file is never closed under a write."""

    def __init__(self, appending: Appending) -> None:
        self.appending = appending
        self.hasher = None if appending.digest is None else HashThread(appending.digest)
        self.digest_update = None if self.hasher is None else self.hasher.update
        self.writeback = None if appending.fd is None else Writeback(appending.fd, appending.offset)
        self.expires: float | None = None

    def consume(self, chunk: bytes) -> None:
        self.appending.consume(chunk, self.digest_update)
        if self.writeback is not None:
            self.writeback.wrote(self.appending.offset)

    def end(self) -> None:
        try:
            if self.writeback is not None:
                self.writeback.finish(self.appending.offset)
            if self.hasher is not None:
                self.hasher.wait()  # the digest has every byte written before it is kept
                self.hasher.close()
        finally:
            self.expires = self.appending.end()  # what was consumed stays (as far as it became durable)


def _past_length(appending: Appending, declared: int | None) -> ProblemError:
    sent = f"a body of {declared} bytes" if declared is not None else "the body"
    return ProblemError(
        "payload-too-large",
        f"{sent} would pass the upload's Upload-Length ({appending.length} bytes) from offset {appending.offset}; nothing past it is kept",
        limit="upload_length",
        headers={"Connection": "close"},
    )


@router.delete(
    "/uploads/{upload_id}",
    status_code=204,
    response_class=Response,
    summary="Terminate the upload: its bytes are removed",
    openapi_extra=UPLOAD_HEADERS,
    responses=problem_responses(401, 403, 404, 412),
)
async def delete_upload(upload_id: str, request: Request, parts: ImportsDep, uploads: UploadsDep, caller: ImportCaller) -> Response:
    require_tus(request)
    if not await anyio.to_thread.run_sync(uploads.remove, caller.tenant, upload_id):
        raise NotFound(f"no upload {bounded(repr(upload_id), 80)}")
    return Response(status_code=204)
