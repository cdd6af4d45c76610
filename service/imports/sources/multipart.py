"""A multipart upload, streamed into the work area: `MultipartUpload`.

A source of the import pipeline (`service.imports.pipeline`). The HTTP
layer hands it the body's chunks as they arrive (with the HTTP layer's own
deadlines: a silent or too slow body ends the iterator with its error) and
the multipart boundary; `stage` feeds them to python-multipart's streaming
parser in a thread of its own (`service.imports.sources.body_pipe`): the
loop receives the next chunks while the thread parses, hashes and writes the
last ones, each byte once. Parts: exactly one `model` (the .onnx file), any
number of `external_data` parts whose file names are the relative locations
the model names (subfolders allowed; the lexical rules of
docs/import-rules.md section 5, also on percent-decoded forms), each of which
the model must use (but `model.sig`, the folder's OpenSSF model signature, which
the `signature` stage verifies), and at most one text field `name` and one `label` (the
model's display name and label, `service.imports.naming`; each read into
memory, refused past `MAX_FIELD_BYTES`). Running byte counts: the model part past
`--max-upload`, or the body past `--max-upload-total`, is `UploadTooLarge`
at once. Every file is written into the work area, which the pipeline
removes on every path, so nothing of a refused upload is kept: a body cut
short waits for the writing thread to close its file (`BodyPipe.stop`)
before its error goes on. Each file's SHA-256 is computed while it streams
(`service.imports.sources.hash_thread`), so the model's id is known before
any worker runs. A malformed body, a part out of place or a refused location
is `BadInput` or `PathRefused`; a full file system an OSError (507). Once the
model part is written, while the rest of the body arrives, a sandboxed
worker checks it (`service.imports.sources.model_part_check`): a model
refused by its own bytes ends the reception at once, with the importer's
refusal; a model that passes names its external locations, and a part
under another name is refused as soon as its headers are read (or at
once, received already): no tensor would use it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
from python_multipart.multipart import MultipartParser, parse_options_header

from service.checks.outcome import SIGNATURE_FILE
from service.errors import BadInput, DomainError, UploadTooLarge, bounded
from service.imports.naming import LIMITS, MAX_FIELD_BYTES, Naming, named
from service.imports.sources.body_pipe import BodyPipe
from service.imports.sources.hash_thread import HashThread
from service.imports.sources.model_part_check import ModelPartCheck
from service.imports.sources.upload import StagedFile, Upload, check_location, display_name_of, unused_parts
from service.imports.staging import Staged, Staging
from service.store.writeback import Writeback

MAX_PARTS_MARGIN = 8


class _PartWriter:
    """The parser's callbacks: headers of a part, then its bytes to a file."""

    def __init__(self, upload: Upload, max_model: int, max_parts: int, model_read: Callable[[], None]) -> None:
        self.upload = upload
        self.model_read = model_read  # the model part is on disk, its file closed
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
        self.field: str | None = None  # the text field being read (`name` or `label`), its bytes in `text`
        self.named: frozenset[str] | None = None  # the locations the model names, once its early check has passed
        self.text = bytearray()

    # header callbacks
    def on_part_begin(self) -> None:
        self.parts += 1
        if self.parts > self.max_parts:
            raise BadInput(f"more than {self.max_parts} parts")
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
            raise BadInput("each part needs a Content-Disposition: form-data header with a name")
        name = options[b"name"]
        filename = _text(options.get(b"filename"), "file name")
        if name == b"model":
            if self.upload.model is not None:
                raise BadInput("more than one 'model' part")
            if filename:
                self.upload.display_name = display_name_of(filename)
            self.current = self.upload.model = StagedFile(self.upload.display_name, self.upload.model_path)
        elif name in (b"name", b"label"):
            self._begin_field(name.decode(), filename)
            return
        elif name == b"external_data":
            if not filename:
                raise BadInput("an 'external_data' part needs a file name: the location the model names")
            location = check_location(filename)
            if location in self.locations:
                raise BadInput(f"two 'external_data' parts for {bounded(repr(location), 200)}")
            self.locations.add(location)
            self.current = StagedFile(location, self.upload.external_dir / location)
            if location == SIGNATURE_FILE:  # the folder's signature: no tensor's file, checked by the signature stage
                self.upload.signature = self.current
            elif self.named is not None and location not in self.named:
                raise unused_parts([location])
            else:
                self.upload.externals.append(self.current)
        else:
            raise BadInput(f"unknown part {bounded(repr(name.decode('latin-1')), 100)}: only 'model', 'external_data', 'name' and 'label'")
        self.fd = _create(self.current.path, self.upload.model_path.parent)
        self.writeback = Writeback(self.fd)

    def named_by_model(self, named: list[str]) -> None:
        """The locations the model names (its early check passed, on the loop): a part
        received already that it does not name is refused now, one to come at its headers
        (one whose headers the thread reads just now may slip by both: its import refuses it)."""
        self.named = frozenset(named)
        unused = sorted(staged.location for staged in list(self.upload.externals) if staged.location not in self.named)
        if unused:
            raise unused_parts(unused)

    def _begin_field(self, field: str, filename: str) -> None:
        """A text field (`name` or `label`): once each, not a file."""
        given = self.upload.naming.name if field == "name" else self.upload.naming.label
        if given is not None:
            raise BadInput(f"more than one {field!r} field")
        if filename:
            raise BadInput(f"the {field!r} field is text, not a file")
        self.current = None
        self.field = field
        self.text = bytearray()

    def _end_field(self) -> None:
        assert self.field is not None
        try:
            value = named(self.field, self.text.decode("utf-8"))
        except UnicodeDecodeError:
            raise BadInput(f"the {self.field} is not UTF-8") from None
        given = Naming(value, None) if self.field == "name" else Naming(None, value)
        self.upload.naming = given.over(self.upload.naming)
        self.field = None

    # data callbacks
    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self.field is not None:
            self.text += data[start:end]
            if len(self.text) > MAX_FIELD_BYTES:
                raise BadInput(f"the {self.field} has more than {MAX_FIELD_BYTES} bytes (at most {LIMITS[self.field]} characters)")
            return
        assert self.current is not None and self.fd is not None and self.writeback is not None
        chunk = memoryview(data)[start:end]
        self.current.size += len(chunk)
        if self.current is self.upload.model and self.current.size > self.max_model:
            raise UploadTooLarge(f"the model part is larger than the limit of {self.max_model} bytes", limit="max_upload")
        self.hasher.update(chunk)
        while chunk:
            chunk = chunk[os.write(self.fd, chunk) :]
        self.writeback.wrote(self.current.size)

    def on_part_end(self) -> None:
        if self.field is not None:
            self._end_field()
            return
        if self.current is not None:
            if self.writeback is not None:
                self.writeback.finish(self.current.size)
            self.current.sha256 = self.hasher.hexdigest()
        self.close()
        if self.current is not None and self.current is self.upload.model:
            self.model_read()

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
        raise BadInput(f"the {what} is not UTF-8") from None


def _create(path: Path, root: Path) -> int:
    """Create `path` (and its folders) inside our own fresh work folder."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as error:
        where = os.path.relpath(path, root)
        raise BadInput(f"cannot place upload file {bounded(repr(where), 200)}: {error.strerror}") from None


class MultipartUpload:
    """A multipart/form-data body (`chunks`, split by `boundary`): a model and its external data parts."""

    sent_by_client = True

    def __init__(self, chunks: AsyncIterator[bytes], boundary: bytes, declared: int | None = None) -> None:
        self.chunks = chunks
        self.boundary = boundary
        self.declared = declared  # the body's Content-Length, if it has one
        self.received = 0  # the body's bytes received so far

    async def stage(self, staging: Staging) -> Staged:
        budget = staging.budget
        area = staging.area
        upload = Upload(area.upload_model, area.upload_external)

        async def checked() -> None:
            writer.named_by_model(await staging.list_externals(area, upload.naming.name or upload.display_name))

        check = ModelPartCheck(checked)
        writer = _PartWriter(upload, budget.max_model, budget.max_files + MAX_PARTS_MARGIN, check.model_read)
        await check.receiving(lambda: self._received(writer, budget.max_total), self._rest)
        budget.take(upload.size, "the upload")
        return upload.staged(area)

    async def settle(self, error: BaseException | None) -> None:
        pass

    def _rest(self) -> int | None:
        """The body's bytes still to come (None: unknown, no Content-Length)."""
        return None if self.declared is None else max(0, self.declared - self.received)

    async def _received(self, writer: _PartWriter, max_total: int) -> Upload:
        """The parts of the body, written by `writer` to its upload's places (see the module comment)."""
        upload = writer.upload
        upload.model_path.parent.mkdir(parents=True, exist_ok=True)  # external_dir is made with its first part
        parser = _parser(self.boundary, writer)
        pipe = BodyPipe(parser.write, writer.end)  # parse, hash and write in a thread while the loop receives
        try:
            async for chunk in self.chunks:  # the iterator's own errors (a body too slow) go on as they are
                self.received += len(chunk)
                if self.received > max_total:
                    raise UploadTooLarge(f"the upload is larger than the limit of {max_total} bytes", limit="max_upload_total")
                if chunk:
                    await _parsed(pipe.feed(chunk))
            await _parsed(pipe.finish())
            try:
                parser.finalize()
            except Exception as error:
                raise BadInput(f"the multipart body is malformed: {str(error)[:200]}") from None
        finally:
            # at once once finished; else the thread drops what is queued and closes the file before the error goes on
            # (shielded: the model part's refusal cancels the reception)
            with anyio.CancelScope(shield=True):
                await pipe.stop()
        if upload.model is None:
            raise BadInput("no 'model' part in the upload")
        if any(staged.sha256 == "" for staged in [upload.model, *upload.externals]):
            raise BadInput("the multipart body ended inside a part")
        return upload


def _parser(boundary: bytes, writer: _PartWriter) -> MultipartParser:
    return MultipartParser(
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


async def _parsed(step: Awaitable[None]) -> None:
    """A step of the pipe: the parser's own errors (a broken body) are BadInput; ours go on."""
    try:
        await step
    except (DomainError, OSError):  # a part refused, a limit, a full disk (507)
        raise
    except Exception as error:
        raise BadInput(f"the multipart body is malformed: {str(error)[:200]}") from None
