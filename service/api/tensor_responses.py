"""Serving tensor bytes: raw layout or .npy, streamed with constant memory.

Owns `tensor_response`. The bytes come from a file range: the model file or an
external data file the worker reported (for a server-side model: in the data
root; for an upload: its copy in the store), or the model's converted tensor
bytes in the store. Before serving, the file is opened below the data root (or
the model's store folder) one path component at a time, following no link
(`service.store.client_paths.open_under`), and checked to be the very file read at import:
same size, mtime_ns and inode (not the device number, which differs between
the nodes mounting a shared store; else 409 `tensor-source-changed`; a
missing file is 410 `tensor-source-gone`); it is then kept open for the next
requests, checked again each time (`service.store.open_files`). A tensor of
up to SMALL_BYTES is read at once; a larger one from a local file goes out
with `sendfile` (`service.server.zero_copy`), from an object by a ranged GET
made before the headers (`ByteSource.begin`: an object removed meanwhile is
410, never a 200 cut short), streamed (`ByteSource.chunks`), so a 4 GB
tensor costs no more memory than a small one.

Headers: Content-Length, ETag (strong; derived from the content-addressed
model id and the tensor's field path and format; the fixed headers are made
once per tensor and format), Accept-Ranges, X-Tensor-Element-Type,
X-Tensor-Dims (a JSON list). A single `Range: bytes=...` gives 206 (an
unsatisfiable one 416; several ranges, an invalid one (non-ASCII digits, say),
or an `If-Range` that does not match, the whole representation; positions
may have any number of digits). `If-Range` uses the strong comparison (a weak
tag or a date never matches); `If-None-Match` the weak one: `*`, our tag or
`W/` and our tag anywhere in the list give 304 (RFC 9110 §13.1).

`?format=npy`: a version 1.0 .npy file (version 2.0 when the header needs it)
for the types numpy has; BFLOAT16 is given as `<u2` bit patterns and the float8
types as `u1` bit patterns (their raw layout is exactly that); the 4-, 2- and
6-bit types and STRING have no .npy form here: 415 `unsupported-media-type`.
STRING tensors' raw form is each element as an 8-byte little-endian length and
its bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Callable
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from service.api.file_range_response import FileRangeResponse
from service.api.problems import ProblemError
from service.errors import bounded
from service.store.byte_source import ByteSource, FileSource
from service.store.memo import Memo
from service.store.records import SourceFile
from service.tasks.catalog_format import NPY_DESCR, TensorRow

SMALL_BYTES = 256 << 10  # tensors up to this size are read in one go, not streamed
HEADERS_CACHED = 16384  # tensors whose fixed headers are kept (a few hundred bytes each)
NPY_MAGIC = b"\x93NUMPY"


def npy_header(descr: str, dims: list[int]) -> bytes:
    shape = "(" + "".join(f"{d}, " for d in dims).rstrip(" ") + ")" if len(dims) != 1 else f"({dims[0]},)"
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    for version, length_bytes in ((1, 2), (2, 4)):
        fixed = len(NPY_MAGIC) + 2 + length_bytes
        padded = -(-(fixed + len(text) + 1) // 64) * 64
        body = text + " " * (padded - fixed - len(text) - 1) + "\n"
        if len(body) < 1 << (8 * length_bytes):
            return NPY_MAGIC + bytes([version, 0]) + len(body).to_bytes(length_bytes, "little") + body.encode("latin-1")
    raise ProblemError("unsupported-media-type", "the tensor's shape does not fit a .npy header")


def _unsatisfiable(size: int) -> ProblemError:
    return ProblemError("range-not-satisfiable", f"the representation has {size} bytes", headers={"Content-Range": f"bytes */{size}"})


# `Range: bytes=first-last` (RFC 9110 §14.1.2); digits are ASCII only (str.isdigit
# takes "²" and other Unicode digits, which int() then refuses or misreads).
_RANGE = re.compile(r"bytes[ \t]*=[ \t]*([0-9]*)[ \t]*-[ \t]*([0-9]*)[ \t]*", re.IGNORECASE)
# One element of a list of entity tags (RFC 9110 §8.8.3): an optional W/ and
# a quoted opaque tag (or nothing: an empty element), then a comma or the end.
_TAG_ITEM = re.compile(r'[ \t]*(?:(W/)?("[\x21\x23-\x7e\x80-\U0010ffff]*")[ \t]*)?(,|\Z)')
MAX_POSITION_DIGITS = 18  # larger positions are all "beyond any representation"
BEYOND = 1 << 63  # stands for every such position


def _position(digits: str) -> int:
    """An ASCII digit string as a byte position; one of more than 18
    significant digits (the grammar sets no bound) is `BEYOND`, larger than
    any representation, without int() of thousands of digits."""
    significant = digits.lstrip("0")
    return int(significant or "0") if len(significant) <= MAX_POSITION_DIGITS else BEYOND


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The one byte range [start, end] asked for, or None for the whole
    representation: no header, several ranges, another unit, or an invalid
    one (RFC 9110 §14.2 lets a server ignore Range; non-ASCII digits are
    invalid). Raises 416 when it is valid but unsatisfiable: a first position
    at or beyond the end (however many digits it has), or a suffix of 0.
    Positions of any length are valid: a huge last position means "to the
    end", a huge suffix "the whole representation"."""
    match = _RANGE.fullmatch(header) if header else None
    if match is None:
        return None
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:  # suffix: the last N bytes
        suffix = _position(last)
        if suffix == 0 or size == 0:
            raise _unsatisfiable(size)
        return max(0, size - suffix), size - 1
    start = _position(first)
    end = _position(last) if last else size - 1
    if last and end < start:
        return None
    if start >= size:
        raise _unsatisfiable(size)
    return start, min(end, size - 1)


def entity_tags(value: str) -> list[tuple[bool, str]] | None:
    """The entity tags of an If-None-Match or If-Range value as (weak, opaque
    tag with its quotes), in order; None when the value is not a list of them
    (then the condition is ignored). Empty list elements are allowed (RFC 9110
    §5.6.1); a comma inside a quoted tag is part of the tag. `*` is not an
    entity tag: see the callers."""
    found: list[tuple[bool, str]] = []
    position = 0
    while True:
        match = _TAG_ITEM.match(value, position)
        if match is None:
            return None
        weak, opaque, separator = match.groups()
        if opaque is not None:
            found.append((weak is not None, opaque))
        if not separator:  # the end of the value
            return found
        position = match.end()


def none_match(header_values: list[str], etag: str) -> bool:
    """RFC 9110 §13.1.2 for a representation that exists, tagged `etag`
    (strong): True when If-None-Match is there and fails its condition, that
    is `*` or a list with a tag equal to ours by the weak comparison (W/
    ignored). Several header lines form one list."""
    value = ",".join(header_values)
    if not value.strip(" \t"):
        return False
    if value.strip(" \t") == "*":
        return True
    tags = entity_tags(value)
    return tags is not None and any(opaque == etag for _, opaque in tags)


def range_condition_holds(if_range: str | None, etag: str) -> bool:
    """RFC 9110 §13.1.5: no If-Range, or one that is our entity tag by the
    strong comparison (a weak tag never matches; a date never does either,
    as tensors carry no Last-Modified)."""
    if if_range is None:
        return True
    tags = entity_tags(if_range)
    return tags is not None and len(tags) == 1 and tags[0] == (False, etag)


async def stream_range(prefix: bytes, source: ByteSource, offset: int, start: int, end: int) -> AsyncIterator[bytes | memoryview]:
    """Bytes [start, end] of prefix + file[offset:]; closes `source` at the end."""
    try:
        if start < len(prefix):
            yield prefix[start : min(len(prefix), end + 1)]
        first = max(start, len(prefix))
        if first <= end:
            async for chunk in source.chunks(offset + first - len(prefix), end + 1 - first):
                yield chunk
    finally:
        source.close()


def _headers_of(model_id: str, row: TensorRow, fmt: str) -> tuple[tuple[str, str], ...]:
    tag = hashlib.sha256(f"{model_id}\0{row.field_path}\0{fmt}".encode()).hexdigest()[:32]
    extension = "npy" if fmt == "npy" else "bin"
    disposition = f"attachment; filename=\"{row.alias}.{extension}\"; filename*=UTF-8''{quote(row.name or row.alias)}.{extension}"
    return (
        ("ETag", f'"{tag}"'),
        ("Accept-Ranges", "bytes"),
        ("Cache-Control", "public, max-age=31536000, immutable"),
        ("X-Tensor-Element-Type", row.elem_type),
        ("X-Tensor-Dims", json.dumps(row.dims, separators=(",", ":"))),
        ("Content-Disposition", disposition),
    )


_HEADERS: Memo[tuple[str, str, str], tuple[tuple[str, str], ...]] = Memo(HEADERS_CACHED)


def fixed_headers(model_id: str, row: TensorRow, fmt: str) -> tuple[tuple[str, str], ...]:
    """The headers every response of this tensor in this format carries (its
    ETag first), made once: a stored model never changes, so its id and the
    tensor's field path name them."""
    return _HEADERS.get((model_id, row.field_path, fmt), lambda: _headers_of(model_id, row, fmt))


def tensor_response(
    request: Request, model_id: str, row: TensorRow, source: tuple[Callable[[], ByteSource], SourceFile] | None, fmt: str
) -> Response:
    """The response for one tensor. `source`: (a call that opens the file
    holding it, checked to be the one recorded; the file's record), None when
    it has no bytes. Called by `ImportParts.read` (on the event loop for a store
    on this machine, else in a worker thread): it opens (and for a small
    tensor reads) the file."""
    prefix = b""
    if fmt == "npy":
        descr = NPY_DESCR.get(row.elem_type)
        if descr is None:
            raise ProblemError(
                "unsupported-media-type", f"{row.elem_type} tensors have no .npy form here; fetch the raw layout (format=raw)"
            )
        prefix = npy_header(descr, row.dims)
    size = len(prefix) + row.length
    headers = dict(fixed_headers(model_id, row, fmt))
    etag = headers["ETag"]
    if none_match(request.headers.getlist("if-none-match"), etag):
        return Response(status_code=304, headers=headers)
    asked = request.headers.get("range")
    wanted = parse_range(asked, size) if range_condition_holds(request.headers.get("if-range"), etag) else None
    start, end = wanted if wanted is not None else (0, size - 1)
    status = 206 if wanted is not None else 200
    if status == 206:
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    headers["Content-Length"] = str(max(0, end - start + 1))
    media_type = "application/octet-stream"
    opened = None
    if source is not None and row.length:
        open_source, identity = source
        if row.offset + row.length > identity.size:
            raise ProblemError("tensor-source-changed", f"the file holding the tensor {bounded(row.name, 100)} is shorter than the tensor")
        opened = open_source()
    if opened is None or request.method == "HEAD" or end < start:
        if opened is not None:
            opened.close()
        if opened is None and row.length:
            raise ProblemError("tensor-source-gone", "the tensor's bytes are not recorded; import the model again")
        body = prefix[start : end + 1] if request.method != "HEAD" else b""
        return Response(body, status_code=status, headers=headers, media_type=media_type)
    if end + 1 - start <= SMALL_BYTES:  # read at once: no streaming hops
        try:
            body = _read_range(prefix, opened, row.offset, start, end)
        finally:
            opened.close()
        return Response(body, status_code=status, headers=headers, media_type=media_type)
    if isinstance(opened, FileSource):  # a local file: sendfile where the server offers it
        from_file = max(start, len(prefix))  # the range is larger than any .npy header: it reaches the file
        first, count = row.offset + from_file - len(prefix), end + 1 - from_file
        return FileRangeResponse(prefix[start : end + 1], opened, first, count, status, headers, media_type)
    from_file = max(start, len(prefix))
    try:
        opened.begin(row.offset + from_file - len(prefix), end + 1 - from_file)  # as stream_range will ask
    except BaseException:
        opened.close()
        raise
    chunks = stream_range(prefix, opened, row.offset, start, end)
    return StreamingResponse(chunks, status_code=status, headers=headers, media_type=media_type)


def _read_range(prefix: bytes, source: ByteSource, offset: int, start: int, end: int) -> bytes:
    """Bytes [start, end] of prefix + file[offset:] (the file may come up short)."""
    head = prefix[start : end + 1]
    first = max(start, len(prefix)) - len(prefix)
    want = end + 1 - max(start, len(prefix))
    return head + (source.read(offset + first, want) if want > 0 else b"")
