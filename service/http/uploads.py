"""Streaming multipart uploads: a model and its external data, straight to disk.

Owns `receive_upload`. The body is read chunk by chunk from `request.stream()`
and fed to python-multipart's streaming parser in a thread of its own
(`service.http.body_pipe`): the loop receives the next chunks while the
thread parses, hashes and writes the last ones, each byte once. Parts: exactly one `model` (the .onnx
file) and any number of `external_data` parts whose file names are the
relative locations the model names (subfolders allowed; the lexical rules of
docs/import-rules.md §5, also on percent-decoded forms). Running byte counts: the model
part past `max_upload`, or the body past `max_upload_total`, cuts the request
off with 413. Every file is written into the request's work folder, which the
caller removes on every path, so nothing of a refused upload is kept: a body
cut short waits for the writing thread to close its file (`BodyPipe.stop`)
before its error goes on, so its bytes are freed before the answer. Each
file's SHA-256 is computed while it streams. A silent or too slow body is a
408 (`service.http.request_body`); a full file system is an OSError the problem map answers with 507.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import Request
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect

from service.errors import ServiceError, bounded
from service.http.body_pipe import BodyPipe
from service.http.hash_thread import HashThread
from service.http.problems import ProblemError
from service.http.request_body import body_chunks
from service.imports.inputs import DEFAULT_DISPLAY_NAME, StagedFile, Upload
from service.paths import check_relative_path
from service.settings import Settings
from service.writeback import Writeback

MAX_PARTS_MARGIN = 8
MAX_BOUNDARY_BYTES = 200  # RFC 2046 allows 70; the parser refuses more than 256
MAX_DISPLAY_NAME = 200
MAX_LOCATION_DEPTH = 64
DRAIN_BYTES = 1 << 20  # read (and drop) up to this much past a limit, so the client sees the 413


class _PartWriter:
    """The parser's callbacks: headers of a part, then its bytes to a file."""

    def __init__(self, upload: Upload, max_model: int, max_parts: int) -> None:
        self.upload = upload
        self.max_model = max_model
        self.max_parts = max_parts
        self.parts = 0
        self.header_field = b""
        self.header_value = b""
        self.headers: dict[bytes, bytes] = {}
        self.fd: int | None = None
        self.writeback: Writeback | None = None  # the current part's file sent to disk as it is written
        self.hasher = HashThread()  # each part's SHA-256, computed beside the parsing and writing
        self.current: StagedFile | None = None
        self.locations: set[str] = set()

    # header callbacks
    def on_part_begin(self) -> None:
        self.parts += 1
        if self.parts > self.max_parts:
            raise ProblemError("bad-request", f"more than {self.max_parts} parts")
        self.headers = {}

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.header_field += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def on_header_end(self) -> None:
        self.headers[self.header_field.strip().lower()] = self.header_value.strip()
        self.header_field = self.header_value = b""

    def on_headers_finished(self) -> None:
        disposition, options = parse_options_header(self.headers.get(b"content-disposition", b""))
        if disposition != b"form-data" or b"name" not in options:
            raise ProblemError("bad-request", "each part needs a Content-Disposition: form-data header with a name")
        name = options[b"name"]
        filename = _text(options.get(b"filename"), "file name")
        if name == b"model":
            if self.upload.model is not None:
                raise ProblemError("bad-request", "more than one 'model' part")
            if filename:
                base = posixpath.basename(filename.replace("\\", "/"))
                self.upload.display_name = bounded(base or DEFAULT_DISPLAY_NAME, MAX_DISPLAY_NAME)
            self.current = self.upload.model = StagedFile(self.upload.display_name, self.upload.model_path)
        elif name == b"external_data":
            if not filename:
                raise ProblemError("bad-request", "an 'external_data' part needs a file name: the location the model names")
            location = check_location(filename)
            if location in self.locations:
                raise ProblemError("bad-request", f"two 'external_data' parts for {bounded(repr(location), 200)}")
            self.locations.add(location)
            self.current = StagedFile(location, self.upload.external_dir / location)
            self.upload.externals.append(self.current)
        else:
            raise ProblemError(
                "bad-request", f"unknown part {bounded(repr(name.decode('latin-1')), 100)}: only 'model' and 'external_data'"
            )
        self.fd = _create(self.current.path, self.upload.model_path.parent)
        self.writeback = Writeback(self.fd)

    # data callbacks
    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        assert self.current is not None and self.fd is not None and self.writeback is not None
        chunk = memoryview(data)[start:end]
        self.current.size += len(chunk)
        if self.current is self.upload.model and self.current.size > self.max_model:
            raise ProblemError(
                "payload-too-large", f"the model part is larger than the limit of {self.max_model} bytes", limit="max_upload"
            )
        self.hasher.update(chunk)
        while chunk:
            chunk = chunk[os.write(self.fd, chunk) :]
        self.writeback.wrote(self.current.size)

    def on_part_end(self) -> None:
        if self.current is not None:
            if self.writeback is not None:
                self.writeback.finish(self.current.size)
            self.current.sha256 = self.hasher.hexdigest()
        self.close()

    def close(self) -> None:
        self.writeback = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def end(self) -> None:
        """The body is over, read whole or not: close the file and stop the hash thread."""
        self.close()
        self.hasher.close()


def _text(value: bytes | None, what: str) -> str:
    if value is None:
        return ""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise ProblemError("bad-request", f"the {what} is not UTF-8") from None


def check_location(filename: str) -> str:
    check_relative_path(filename)
    location = posixpath.normpath(filename)
    if location in (".", "") or location.count("/") >= MAX_LOCATION_DEPTH:
        raise ProblemError("path-refused", f"not a usable external data location: {bounded(repr(filename), 200)}")
    return location


def _create(path: Path, root: Path) -> int:
    """Create `path` (and its folders) inside our own fresh work folder."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as error:
        where = os.path.relpath(path, root)
        raise ProblemError("bad-request", f"cannot place upload file {bounded(repr(where), 200)}: {error.strerror}") from None


async def receive_upload(request: Request, model_path: Path, external_dir: Path, settings: Settings) -> Upload:
    """Stream the multipart body of `request` to `model_path` and `external_dir` (see the module comment)."""
    max_model, max_total, max_parts = settings.max_upload, settings.max_upload_total, settings.max_external_files
    _, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if not boundary:
        raise ProblemError("bad-request", "multipart/form-data without a boundary")
    if len(boundary) > MAX_BOUNDARY_BYTES:
        raise ProblemError("bad-request", f"the multipart boundary is longer than {MAX_BOUNDARY_BYTES} bytes (RFC 2046: at most 70)")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_total:
        raise ProblemError(
            "payload-too-large",
            f"the upload is larger than the limit of {max_total} bytes",
            limit="max_upload_total",
            headers={"Connection": "close"},
        )
    upload = Upload(model_path, external_dir)
    model_path.parent.mkdir(parents=True, exist_ok=True)  # external_dir is made with its first part
    writer = _PartWriter(upload, max_model, max_parts + MAX_PARTS_MARGIN)
    parser = MultipartParser(
        boundary,
        {
            "on_part_begin": writer.on_part_begin,
            "on_part_data": writer.on_part_data,
            "on_part_end": writer.on_part_end,
            "on_header_field": writer.on_header_field,
            "on_header_value": writer.on_header_value,
            "on_header_end": writer.on_header_end,
            "on_headers_finished": writer.on_headers_finished,
        },
    )
    received = 0
    stream = body_chunks(request, settings.body_timeout, settings.min_upload_rate)
    pipe = BodyPipe(parser.write, writer.end)  # parse, hash and write in a thread while the loop receives
    try:
        async for chunk in stream:
            received += len(chunk)
            if received > max_total:
                raise ProblemError(
                    "payload-too-large", f"the upload is larger than the limit of {max_total} bytes", limit="max_upload_total"
                )
            if chunk:
                await pipe.feed(chunk)
        await pipe.finish()
        parser.finalize()
    except ProblemError as error:
        await pipe.stop()
        if error.problem.status == 413:
            await _drain(stream, DRAIN_BYTES)
            error.headers["Connection"] = "close"
        raise
    except (ClientDisconnect, ServiceError, OSError):  # a part's location refused (PathRefused); a full disk (507)
        raise
    except Exception as error:  # the parser's own errors: a broken body
        raise ProblemError("bad-request", f"the multipart body is malformed: {str(error)[:200]}") from None
    finally:
        await pipe.stop()  # at once once finished; else the thread drops what is queued and closes the file before the answer
    if upload.model is None:
        raise ProblemError("bad-request", "no 'model' part in the upload")
    if any(staged.sha256 == "" for staged in [upload.model, *upload.externals]):
        raise ProblemError("bad-request", "the multipart body ended inside a part")
    return upload


async def _drain(stream: AsyncIterator[bytes], limit: int) -> None:
    """Read and drop up to `limit` more bytes, so a well-behaved client that is
    still sending sees the 413 rather than a reset connection."""
    drained = 0
    try:
        async for chunk in stream:
            drained += len(chunk)
            if drained > limit:
                break
    except Exception:
        pass
