"""A multipart upload request, as the pipeline's source: `multipart_source`, and its refusals before the body's end.

Owns what is HTTP about an upload: the `Content-Type`'s boundary (present,
at most `MAX_BOUNDARY_BYTES`), a declared `Content-Length` past
`--max-upload-total` refused before a byte is read, the body's chunks with
their deadlines (`service.api.request_body.body_chunks`), an event set once
the body has been read whole (`service.api.client_presence` watches the
connection from then on), and `refused_unread`: an upload refused before
its body has been read whole (past a size limit, a part out of place, its
model part refused by the worker that checked it while the rest arrived:
`service.imports.sources.model_part_check`) is answered at once with
`Connection: close`, after reading (and dropping) up to `DRAIN_BYTES` more,
so a well-behaved client that is still sending a short rest sees the answer
rather than a reset connection; the rest of a long body is never read. The
parts themselves are the source's (`service.imports.sources.multipart`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from fastapi import Request
from python_multipart.multipart import parse_options_header

from service.api.problems import ProblemError, known_problem
from service.api.request_body import body_chunks
from service.errors import DomainError
from service.imports.sources.multipart import MultipartUpload
from service.settings import Settings

MAX_BOUNDARY_BYTES = 200  # RFC 2046 allows 70; the parser refuses more than 256
DRAIN_BYTES = 1 << 20  # read (and drop) up to this much past a limit, so the client sees the 413


class UploadBody:
    """The body of an upload request, read once, as chunks; `read` is set once it has ended."""

    def __init__(self, request: Request, settings: Settings) -> None:
        self.read = anyio.Event()
        self._chunks = body_chunks(request, settings.body_timeout, settings.min_upload_rate)

    async def chunks(self) -> AsyncIterator[bytes]:
        async for chunk in self._chunks:
            yield chunk
        self.read.set()

    async def drained(self, limit: int = DRAIN_BYTES) -> None:
        """Read and drop up to `limit` more bytes."""
        drained = 0
        try:
            async for chunk in self._chunks:
                drained += len(chunk)
                if drained > limit:
                    break
        except Exception:
            pass


def multipart_source(request: Request, settings: Settings) -> tuple[MultipartUpload, UploadBody]:
    """The upload's source, and its body (see the module comment)."""
    _, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if not boundary:
        raise ProblemError("bad-request", "multipart/form-data without a boundary")
    if len(boundary) > MAX_BOUNDARY_BYTES:
        raise ProblemError("bad-request", f"the multipart boundary is longer than {MAX_BOUNDARY_BYTES} bytes (RFC 2046: at most 70)")
    declared = request.headers.get("content-length")
    length = int(declared) if declared is not None and declared.isdigit() else None
    if length is not None and length > settings.max_upload_total:
        raise ProblemError(
            "payload-too-large",
            f"the upload is larger than the limit of {settings.max_upload_total} bytes",
            limit="max_upload_total",
            headers={"Connection": "close"},
        )
    body = UploadBody(request, settings)
    return MultipartUpload(body.chunks(), boundary, length), body


async def refused_unread(error: DomainError | OSError, body: UploadBody) -> ProblemError | None:
    """The problem of an upload refused while its body arrived: drained a little, then the connection closed
    (None: an error no problem names, raised on as it is)."""
    problem = known_problem(error)
    if problem is None:
        return None
    await body.drained()
    problem.headers["Connection"] = "close"
    return problem
