"""The tus 1.0.0 protocol's headers, as the `/uploads` routes speak them.

Owns the version and the extensions served (creation, termination,
expiration: https://tus.io/protocols/resumable-upload), `require_tus` (412
unless `Tus-Resumable: 1.0.0`, with `Tus-Version`), the parsing of
`Upload-Length` and `Upload-Offset` (decimal) and the check of
`Upload-Metadata` (its pairs: `service.imports.sources.upload_metadata`;
its `filename` decoded, UTF-8, at most `MAX_FILENAME_BYTES`; its `name` and
`label`, the model's, within their rules; its `part`, `model` or
`external_data`), each a 400 when malformed, `http_date` (RFC 9110's IMF-fixdate, for `Upload-Expires`) and
`TusHeaderMiddleware` (pure ASGI: `Tus-Resumable: 1.0.0` on every response
under `/uploads`, problems included).
"""

from __future__ import annotations

import email.utils

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.problems import ProblemError
from service.errors import BadInput
from service.imports.sources.upload_metadata import holds_model, metadata_pairs, naming_of_metadata

TUS_VERSION = "1.0.0"
TUS_EXTENSIONS = "creation,termination,expiration"
OFFSET_MEDIA_TYPE = "application/offset+octet-stream"
UPLOADS_PATH = "/uploads"
MAX_FILENAME_BYTES = 1024
MAX_DECIMAL_DIGITS = 19  # below 2**63
_TUS_RAW_HEADER = (b"tus-resumable", TUS_VERSION.encode())


def require_tus(request: Request) -> None:
    """412 unless the request speaks tus 1.0.0."""
    sent = request.headers.get("tus-resumable")
    if sent != TUS_VERSION:
        said = "no Tus-Resumable header" if sent is None else f"Tus-Resumable: {sent[:20]!r}"
        raise ProblemError(
            "tus-version-unsupported", f"{said}: this server speaks tus {TUS_VERSION} only", headers={"Tus-Version": TUS_VERSION}
        )


def decimal_header(request: Request, name: str) -> int:
    """A required header holding a non-negative decimal number; 400 otherwise."""
    value = request.headers.get(name)
    if value is None:
        raise ProblemError("bad-request", f"the {name} header is required")
    if not (value.isascii() and value.isdigit()) or len(value) > MAX_DECIMAL_DIGITS:
        raise ProblemError("bad-request", f"{name} must be a decimal number of bytes, not {value[:40]!r}")
    return int(value)


def parse_metadata(value: str | None) -> tuple[str, str]:
    """`Upload-Metadata`: (the header as sent, to echo in HEAD; its `filename`
    decoded, or ""), every pair well formed (`metadata_pairs`) and its `name`
    and `label`, if any, within their rules (`naming_of_metadata`); 400 otherwise."""
    try:
        pairs = metadata_pairs(value)
        naming_of_metadata(pairs)
        holds_model(pairs)
    except BadInput as error:
        raise ProblemError("bad-request", error.detail) from None
    filename = pairs.get("filename", b"")
    if len(filename) > MAX_FILENAME_BYTES:
        raise ProblemError("bad-request", f"Upload-Metadata: the filename is longer than {MAX_FILENAME_BYTES} bytes")
    try:
        return (value or "").strip(), filename.decode("utf-8")
    except UnicodeDecodeError:
        raise ProblemError("bad-request", "Upload-Metadata: the filename is not UTF-8") from None


def http_date(when: float) -> str:
    """RFC 9110's IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`."""
    return email.utils.formatdate(when, usegmt=True)


def _under_uploads(path: str) -> bool:
    return path == UPLOADS_PATH or path.startswith(UPLOADS_PATH + "/")


class TusHeaderMiddleware:
    """`Tus-Resumable: 1.0.0` on every response under `/uploads` (a problem, a
    401 from the credentials check, a 405: all of them)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _under_uploads(scope.get("path", "")):
            await self.app(scope, receive, send)
            return

        async def send_with_tus(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(name, value) for name, value in message.get("headers", []) if name.lower() != _TUS_RAW_HEADER[0]]
                message = {**message, "headers": [*headers, _TUS_RAW_HEADER]}
            await send(message)

        await self.app(scope, receive, send_with_tus)
