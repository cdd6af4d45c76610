"""RFC 9457 problem details: every error response of the service.

Owns the problem types (one stable URI per kind, `PROBLEM_BASE` + slug), the
`ProblemError` exception the HTTP layer raises, the one map from the domain
errors of `service.errors` (and a full file system) to problems
(`DOMAIN_PROBLEMS`, `known_problem`; a worker's refusal by its kind,
`import_problem`), and the exception handlers that turn all of them and the
framework's errors (validation errors, unknown routes, wrong methods,
anything unexpected) into `application/problem+json`. A detail is bounded in
size and printable: it never echoes raw bytes.

Also owns what is logged as an error: a traceback only for a real bug. A
client that goes away mid-request (starlette's `ClientDisconnect` when a body
is read, or anyio's stream errors once the server reported the disconnect) is
one INFO line from `DisconnectMiddleware`, not an exception for the 500
handler and uvicorn to log twice with tracebacks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import errors
from service.api.request_context import current_request
from service.errors import bounded, is_full
from service.sandbox.protocol import ImportFailure

PROBLEM_BASE = "https://onnx-import.example/problems/"
PROBLEM_MEDIA_TYPE = "application/problem+json"
MAX_INSTANCE_CHARS = 300
NOSNIFF_HEADERS = {"X-Content-Type-Options": "nosniff"}  # also here: the 500 handler answers outside the app's middleware
# What a read or write on a connection the client closed raises (only taken for
# a disconnect once the server has reported one, except ClientDisconnect itself)
DISCONNECT_ERRORS: tuple[type[BaseException], ...] = (
    ClientDisconnect,
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    ConnectionError,
)

log = logging.getLogger("service")


@dataclass(frozen=True, slots=True)
class ProblemType:
    slug: str
    title: str
    status: int

    @property
    def uri(self) -> str:
        return PROBLEM_BASE + self.slug


def _types(*items: tuple[str, str, int]) -> dict[str, ProblemType]:
    return {slug: ProblemType(slug, title, status) for slug, title, status in items}


# Import errors: one per importer ErrorKind, plus the sandbox's own two kinds.
IMPORT_PROBLEMS = _types(
    ("malformed", "The model is not valid protobuf", 422),
    ("invalid-model", "The model is not a valid ONNX model", 422),
    ("unsupported", "The model uses something the importer does not support", 422),
    ("external-data", "The model's external data is missing or unsafe", 422),
    ("io", "The model could not be read", 500),
    ("resource-limit", "The import exceeded a resource limit", 422),
    ("worker-crashed", "The import worker died unexpectedly", 500),
)
KIND_SLUGS = {
    "Malformed": "malformed",
    "InvalidModel": "invalid-model",
    "Unsupported": "unsupported",
    "ExternalData": "external-data",
    "Io": "io",
    "ResourceLimit": "resource-limit",
    "WorkerCrashed": "worker-crashed",
}

# Everything else.
PROBLEMS = IMPORT_PROBLEMS | _types(
    ("bad-request", "The request is not well formed", 400),
    ("path-refused", "The path is not a relative path inside the data root", 400),
    ("unauthorized", "No valid credentials: send Authorization: Bearer <secret>", 401),
    ("forbidden", "The credentials do not allow this", 403),
    ("link-refused", "The link is not one this service made: changed, cut, or signed by a key it no longer holds", 403),
    ("link-expired", "The link has expired: ask for a new one", 403),
    ("path-forbidden", "The path leads outside the data root or to something that is not a regular file", 403),
    ("not-found", "No such resource", 404),
    ("method-not-allowed", "The method is not allowed on this resource", 405),
    ("tensor-source-changed", "The file holding the tensor changed since the import", 409),
    ("model-source-changed", "The model's files changed since the import", 409),
    ("ambiguous-tensor-name", "Several tensors of the model have this name", 409),
    ("upload-offset-mismatch", "The Upload-Offset is not the number of bytes the upload holds", 409),
    ("upload-busy", "Another request is writing this upload", 409),
    ("upload-incomplete", "An upload the import names holds fewer bytes than its Upload-Length", 409),
    ("tensor-source-gone", "The file holding the tensor is gone", 410),
    ("request-timeout", "The request came too slowly", 408),
    ("tus-version-unsupported", "The request does not speak tus 1.0.0: send Tus-Resumable: 1.0.0", 412),
    ("payload-too-large", "The upload exceeds a size limit", 413),
    ("unsupported-media-type", "The media type is not supported here", 415),
    ("range-not-satisfiable", "The requested range is not within the representation", 416),
    ("validation-error", "The request did not validate", 422),
    ("diff-too-large", "The two models' graphs are too large to compare", 422),
    ("too-many-uploads", "The tenant has as many resumable uploads open as it may", 429),
    ("internal-error", "Internal server error", 500),
    ("overloaded", "Too many imports are running or waiting", 503),
    ("not-ready", "The service is not ready", 503),
    ("storage-unavailable", "Object storage or the index's database does not answer", 503),
    ("store-full", "The store cannot hold this model within its size cap", 507),
    ("tenant-quota-exceeded", "The tenant's share of the store is used up", 507),
)
_BY_STATUS = {
    400: "bad-request",
    403: "path-forbidden",
    404: "not-found",
    405: "method-not-allowed",
    413: "payload-too-large",
    415: "unsupported-media-type",
    422: "validation-error",
    503: "not-ready",
}


class ProblemError(Exception):
    """An error response: a problem type, a detail and extension members."""

    def __init__(self, slug: str, detail: str, *, headers: dict[str, str] | None = None, **extensions: Any) -> None:
        super().__init__(detail)
        self.problem = PROBLEMS[slug]
        self.detail = bounded(detail)
        self.headers = headers or {}
        self.extensions = extensions


# Io refusals with a known cause: not an I/O failure of ours, but the file's state.
IO_REASON_SLUGS = {"not-found": "not-found", "hard-linked": "path-forbidden", "changed": "model-source-changed"}


def import_problem(error: ImportFailure, *, limit: str | None = None) -> ProblemError:
    """The problem for an import error as the worker reported it."""
    problem = ProblemError(
        KIND_SLUGS.get(error.kind, "worker-crashed"),
        error.message,
        kind=error.kind,
        offset=error.offset,
        field_path=bounded(error.field_path, 300) if error.field_path else None,
        input=bounded(error.input, 300),
    )
    if limit is not None:
        problem.extensions["limit"] = limit
    if error.kind == "Io" and error.reason in IO_REASON_SLUGS:
        problem.problem = PROBLEMS[IO_REASON_SLUGS[error.reason]]
    return problem


# The one map of domain errors (`service.errors`) to problems; ImportFailed is
# the worker's report, mapped by its kind (`import_problem`).
DOMAIN_PROBLEMS: dict[type[errors.DomainError], str] = {
    errors.NotFound: "not-found",
    errors.BadInput: "bad-request",
    errors.LinkRefused: "link-refused",
    errors.LinkExpired: "link-expired",
    errors.DiffTooLarge: "diff-too-large",
    errors.PathRefused: "path-refused",
    errors.PathForbidden: "path-forbidden",
    errors.StoreFull: "store-full",
    errors.ImportTooLarge: "payload-too-large",
    errors.UploadTooLarge: "payload-too-large",
    errors.TenantQuotaExceeded: "tenant-quota-exceeded",
    errors.Overloaded: "overloaded",
    errors.StorageUnavailable: "storage-unavailable",
    errors.ModelSourceChanged: "model-source-changed",
    errors.TensorSourceChanged: "tensor-source-changed",
    errors.TensorSourceGone: "tensor-source-gone",
    errors.UploadBusy: "upload-busy",
    errors.UploadOffsetMismatch: "upload-offset-mismatch",
    errors.UploadIncomplete: "upload-incomplete",
    errors.TooManyUploads: "too-many-uploads",
}


def known_problem(error: Exception) -> ProblemError | None:
    """The problem a domain error, or a full file system, is answered with; None for anything else (a bug)."""
    if isinstance(error, errors.DomainError):
        return domain_problem(error)
    if isinstance(error, OSError) and is_full(error):
        return ProblemError("store-full", "the store's file system is full")
    return None


def domain_problem(error: errors.DomainError) -> ProblemError:
    """The problem a domain error is answered with."""
    if isinstance(error, errors.ImportFailed):
        return import_problem(error.failure, limit=error.limit)
    problem = ProblemError(DOMAIN_PROBLEMS[type(error)], error.detail)
    if error.limit is not None:
        problem.extensions["limit"] = error.limit
    if isinstance(error, errors.Overloaded | errors.StorageUnavailable):
        problem.headers["Retry-After"] = str(error.retry_after)
    if isinstance(error, errors.UploadOffsetMismatch):
        problem.headers["Upload-Offset"] = str(error.offset)  # tus: where to resume
        problem.extensions["upload_offset"] = error.offset
    if isinstance(error, errors.UploadIncomplete):
        problem.extensions["upload"] = error.upload_id
        problem.extensions["upload_offset"] = error.offset
    return problem


def problem_response(request: Request, error: ProblemError) -> JSONResponse:
    body: dict[str, Any] = {
        "type": error.problem.uri,
        "title": error.problem.title,
        "status": error.problem.status,
        "detail": error.detail,
        "instance": bounded(request.url.path, MAX_INSTANCE_CHARS),
    }
    body.update(error.extensions)
    info = current_request()
    if info is not None:
        body["request_id"] = info.request_id
    headers = NOSNIFF_HEADERS | error.headers
    return JSONResponse(body, status_code=error.problem.status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)


async def _on_problem(request: Request, error: Exception) -> Response:
    assert isinstance(error, ProblemError)
    return problem_response(request, error)


async def _on_known_error(request: Request, error: Exception) -> Response:
    """A domain error, or a full file system anywhere (the store, an upload,
    a worker's streams): its problem; any other OSError is a bug."""
    problem = known_problem(error)
    if problem is None:
        return await _on_unexpected(request, error)
    return problem_response(request, problem)


async def _on_validation(request: Request, error: Exception) -> Response:
    assert isinstance(error, RequestValidationError)
    errors = [
        {"loc": [str(part) for part in item.get("loc", ())][:10], "msg": bounded(str(item.get("msg", "")), 200)}
        for item in list(error.errors())[:20]
    ]
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    detail = f"{'.'.join(first['loc'])}: {first['msg']}"
    return problem_response(request, ProblemError("validation-error", detail, errors=errors))


async def _on_http_exception(request: Request, error: Exception) -> Response:
    assert isinstance(error, StarletteHTTPException)
    slug = _BY_STATUS.get(error.status_code)
    if slug is None:
        slug = "internal-error" if error.status_code >= 500 else "bad-request"
    problem = ProblemError(slug, str(error.detail), headers=dict(error.headers or {}))
    if problem.problem.status != error.status_code:  # keep the framework's status
        problem.problem = ProblemType(problem.problem.slug, problem.problem.title, error.status_code)
    return problem_response(request, problem)


async def _on_unexpected(request: Request, error: Exception) -> Response:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return problem_response(request, ProblemError("internal-error", "an unexpected error occurred; see the service log"))


def install_problem_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ProblemError, _on_problem)
    app.add_exception_handler(errors.DomainError, _on_known_error)
    app.add_exception_handler(OSError, _on_known_error)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http_exception)
    app.add_exception_handler(Exception, _on_unexpected)


def is_disconnect(error: BaseException, reported: bool) -> bool:
    """Whether `error` (every leaf of a group) is the client going away;
    `reported`: the server said so (an `http.disconnect` message)."""
    if isinstance(error, BaseExceptionGroup):
        return all(is_disconnect(inner, reported) for inner in error.exceptions)
    return isinstance(error, ClientDisconnect) or (reported and isinstance(error, DISCONNECT_ERRORS))


class DisconnectMiddleware:
    """A client gone mid-request: one INFO line, no 500 handler, no traceback.
    Any other exception passes through untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        reported = False

        async def watched_receive() -> Message:
            nonlocal reported
            message = await receive()
            reported = reported or message["type"] == "http.disconnect"
            return message

        try:
            await self.app(scope, watched_receive, send)
        except Exception as error:
            if not is_disconnect(error, reported):
                raise
            peer = scope.get("client")
            client = f"{peer[0]}:{peer[1]}" if peer else "the client"
            path = bounded(scope.get("path", ""), MAX_INSTANCE_CHARS)
            log.info("%s went away during %s %s; request abandoned", client, scope.get("method"), path)
            if (info := current_request()) is not None:
                info.client_gone = True  # the request log's 499, not a 500
