"""Resumable imports over tus 1.0 (creation and termination), as docs/http-api.md
specifies: each file (the model and each external data file) is an upload of
its own, sent in PATCH requests from the last byte the service holds, then
`POST /models` names the uploads.

Owns the protocol as steps that do no I/O (`ResumableImport.steps`, a
generator yielding `Call`s and `Pause`s and sent back each call's `Answer`),
so that the synchronous and the asynchronous client each run it with their
own HTTP client and sleep. What it decides:

- a file's upload is found again through the `ResumeStore` (HEAD: its offset;
  404 or 410: created anew), else created (`POST /uploads`);
- the client stays on its origin: an upload URL on another scheme, host or
  port than the client's base URL is never requested. A `Location` there is
  `CrossOriginURL`, before anything is sent or kept; one kept by an earlier
  run is forgotten, and the upload created anew;
- each PATCH sends at most `PATCH_BYTES`, read from the file `READ_BYTES` at
  a time as the request is written (never the whole file in memory);
- a PATCH cut off (a dropped connection, a reset, a timeout), or answered
  409, 408, 429 or 5xx, is followed by HEADs to learn the service's offset
  once it stays put (the service may still be writing what was in flight,
  and answers 409 to a PATCH meanwhile), and continued from there: at once
  when the service holds more than before, else after a doubling backoff
  (`Retry-After` when the service sent one), at most `MAX_STALLS` times in a
  row;
- the loop is bounded whatever the service's offsets do (forward, then
  back): a file's PATCHes send at most twice its bytes and one PATCH's
  (`PATCH_BYTES`), and there are at most its pieces and `MAX_RESUMES` of
  them; the PATCH that would pass either is not sent (`ResumeBoundExceeded`,
  the upload kept);
- the model's upload says so (`part` `model` in its metadata): the PATCH
  that finishes it answers the model's refusal (422, the upload removed):
  it is raised, nothing of the external data is sent, and the resume
  entries are forgotten;
- the import is retried on 503 (per `Retry`) and on connection errors; once
  it has succeeded, or refused the uploaded content (400, 413, 422: the
  service removes the uploads then), the resume entries are forgotten; any
  other answer leaves them, as the service keeps the uploads, for the import
  to be asked again.
"""

from __future__ import annotations

import base64
import logging
import math
import os
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx

from service.client._common import CrossOriginURL, Json, ResumeBoundExceeded, ServiceError, on_origin, origin_of, retry_after_seconds
from service.client.progress import Progress
from service.client.resume_store import ResumeStore, fingerprint
from service.client.retry import Retry

TUS_VERSION = "1.0.0"
RESUMABLE_ABOVE = 64 << 20  # bytes in all (model and external data) above which `resumable=None` uploads resumably
PATCH_BYTES = 128 << 20  # the most one PATCH request sends
READ_BYTES = 1 << 20  # what is read from the file at a time while a PATCH is written
MAX_STALLS = 8  # consecutive failed PATCHes after which the service holds no more bytes than before: then give up
MAX_BACKOFF = 30.0  # seconds, the longest wait between two of them
SETTLE_SECONDS = 0.25  # after a failed PATCH, the offset is asked again this much later, until it stays put
MAX_SETTLE_LOOKS = 120
MAX_RESUMES = 64  # PATCH requests of a file beyond its pieces (ceil(size / PATCH_BYTES)): resumes after a cut, a 409, a 5xx
OFFSET_CONTENT_TYPE = "application/offset+octet-stream"
RETRIED_PATCH = frozenset({408, 409, 429})  # and every 5xx
# The import's refusals of what was uploaded (a bad model, an unused external file, too many bytes): the
# service has removed the uploads, and so the client forgets them. After any other refusal (503, 507, a 5xx,
# a key without the scope, ...) the uploads stay in the service for the import to be asked again.
FORGOTTEN_AFTER_REFUSAL = frozenset({400, 413, 422})
MODEL_REFUSED = 422  # the answer to the PATCH that finishes the model's upload when the service refuses the model

T = TypeVar("T")
log = logging.getLogger("service.client")


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A request body: `length` bytes of `path` from `offset`; `on_read` is told
    how many of them have been read so far."""

    path: Path
    offset: int
    length: int
    on_read: Callable[[int], None]


@dataclass(frozen=True, slots=True)
class Call:
    method: str
    url: str
    headers: dict[str, str]
    json: Json | None = None
    body: FileSlice | None = None
    params: httpx.QueryParams | None = None


@dataclass(frozen=True, slots=True)
class Pause:
    seconds: float


Answer = httpx.Response | httpx.TransportError  # a response with its body read, or why none came
Steps = Generator[Call | Pause, Answer | None, T]


class ResumableUnsupported(Exception):
    """The service has no `/uploads` (404 or 405 to its creation): an older one."""


class FileChanged(ValueError):
    """A file being uploaded is shorter than when the upload began."""


@dataclass(frozen=True, slots=True)
class Part:
    """One file of an import: `name` is what it is sent as (the model's file
    name, or an external data file's location)."""

    path: Path
    name: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path, name: str) -> Part:
        status = os.stat(path)
        return cls(path, name, status.st_size, status.st_mtime_ns)


def read_slice(body: FileSlice, chunk: int = READ_BYTES) -> Generator[bytes]:
    """The bytes of `body`, `chunk` at a time (the synchronous body; the
    asynchronous client reads the same way through anyio)."""
    with body.path.open("rb") as file:
        file.seek(body.offset)
        sent = 0
        while sent < body.length:
            data = file.read(min(chunk, body.length - sent))
            if not data:
                raise FileChanged(f"{body.path}: ended at byte {body.offset + sent}, before {body.offset + body.length}")
            sent += len(data)
            body.on_read(sent)
            yield data


def tus_headers(**more: str) -> dict[str, str]:
    return {"Tus-Resumable": TUS_VERSION} | more


def upload_id(url: str) -> str:
    """The id the import names an upload by: the last segment of its URL."""
    return httpx.URL(url).path.rstrip("/").rsplit("/", 1)[-1]


def status_of(answer: Answer) -> int | None:
    return answer.status_code if isinstance(answer, httpx.Response) else None


def header_int(response: httpx.Response, name: str) -> int | None:
    value = response.headers.get(name, "")
    return int(value) if value.isdigit() else None


def failure(answer: Answer) -> Exception:
    """The exception for an answer given up on."""
    return ServiceError.from_response(answer) if isinstance(answer, httpx.Response) else answer


@dataclass(slots=True)
class Budget:
    """What one file's resume loop has spent (`sent` bytes read into PATCH
    bodies, `patches` sent) and may spend."""

    part: Part
    max_bytes: int
    max_patches: int
    sent: int = 0
    patches: int = 0

    @classmethod
    def of(cls, part: Part, patch_bytes: int) -> Budget:
        return cls(part, 2 * part.size + patch_bytes, math.ceil(part.size / patch_bytes) + MAX_RESUMES)

    def spend(self, length: int) -> None:
        """Count one more PATCH of `length` bytes, or raise if it would pass a bound."""
        if self.sent + length > self.max_bytes:
            why = f"{length:,} more would pass the bound on bytes"
        elif self.patches >= self.max_patches:
            why = "one more would pass the bound on PATCH requests"
        else:
            self.patches += 1
            return
        part = self.part
        counts = {"sent": self.sent, "patches": self.patches, "max_bytes": self.max_bytes, "max_patches": self.max_patches}
        raise ResumeBoundExceeded(why, name=part.name, size=part.size, **counts)


class ResumableImport:
    """One import of `parts` (the model first) to the service at `service`
    (the client's base URL, part of each upload's fingerprint), with `params`
    (the import's query: its checks) and `naming` (the name and label the
    import gives the model: members of its JSON, never of an upload's
    metadata, so an upload resumed keeps its fingerprint)."""

    def __init__(
        self,
        service: str,
        parts: list[Part],
        store: ResumeStore,
        retry: Retry,
        report: Progress | None,
        *,
        automatic: bool = False,
        patch_bytes: int = PATCH_BYTES,
        params: httpx.QueryParams | None = None,
        naming: dict[str, str] | None = None,
    ) -> None:
        self.service = service
        self.params = params or None
        self.naming = naming or {}
        self.parts = parts
        self.store = store
        self.retry = retry
        self.report = report
        self.automatic = automatic
        self.patch_bytes = patch_bytes
        self.total = sum(part.size for part in parts)
        self.keys = [fingerprint(service, part.path, part.size, part.mtime_ns, part.name) for part in parts]

    def steps(self) -> Steps[Json]:
        """Upload every part, then import them; the summary."""
        urls = []
        before = 0
        for part, key in zip(self.parts, self.keys, strict=True):
            try:
                urls.append((yield from self._upload(part, key, before)))
            except ServiceError as error:
                if error.status == MODEL_REFUSED and part is self.parts[0]:  # the service removed it: the import is over
                    for each in self.keys:
                        self.store.forget(each)
                raise
            before += part.size
        request: Json = {"upload": upload_id(urls[0]), **self.naming}
        if len(self.parts) > 1:
            request["external_data"] = {part.name: upload_id(url) for part, url in zip(self.parts[1:], urls[1:], strict=True)}
        answer = yield from self._asked(Call("POST", "/models", {}, json=request, params=self.params))
        if isinstance(answer, httpx.Response) and (answer.is_success or answer.status_code in FORGOTTEN_AFTER_REFUSAL):
            for key in self.keys:
                self.store.forget(key)
        if isinstance(answer, httpx.Response) and answer.is_success:
            summary: Json = answer.json()
            return summary
        raise failure(answer)

    # -- one file

    def _upload(self, part: Part, key: str, before: int) -> Steps[str]:
        """The URL of `part`'s upload once the service holds all of it."""
        created = False
        budget = Budget.of(part, self.patch_bytes)
        while True:
            url = self.store.get(key)
            if url is not None and on_origin(self.service, url) is None:
                elsewhere, here = origin_of(httpx.URL(url)), origin_of(httpx.URL(self.service))
                log.warning("the upload URL kept for %r is on %s, not on %s: not followed, forgotten", part.name, elsewhere, here)
                self.store.forget(key)
                url = None
            offset = None
            if url is not None:
                offset = yield from self._offset(url, part)
            if offset is None:
                if created:  # created in this run and gone already (expired): not again
                    raise ServiceError(404, {"detail": f"the upload of {part.name!r} vanished from the service while being sent"})
                url = yield from self._create(part)
                created = True
                self.store.put(key, url)
                offset = 0
            assert url is not None
            self._tell(before + offset)
            if (yield from self._send(part, url, offset, before, budget)):
                return url
            self.store.forget(key)  # the service no longer has it: create it anew

    def _offset(self, url: str, part: Part, *, unknown: int | None = None) -> Steps[int | None]:
        """What the service holds of the upload at `url`, or None when it has
        no such upload (or one of another length). A service that cannot
        tell (no answer, a 5xx) raises, unless `unknown` is given: then that."""
        answer = yield from self._asked(Call("HEAD", url, tus_headers()))
        if isinstance(answer, httpx.Response) and answer.status_code in (403, 404, 410):
            return None
        if unknown is not None and (not isinstance(answer, httpx.Response) or answer.status_code >= 500):
            return unknown
        if not isinstance(answer, httpx.Response) or not answer.is_success:
            raise failure(answer)
        offset, length = header_int(answer, "Upload-Offset"), header_int(answer, "Upload-Length")
        if offset is None or (length is not None and length != part.size) or offset > part.size:
            return None
        return offset

    def _settled_offset(self, url: str, part: Part, last: int) -> Steps[int | None]:
        """The service's offset once it stops moving: after a cut connection the
        service may still be taking in what was in flight, and holds the upload
        meanwhile (a PATCH then is a 409, its body sent for nothing). `last`,
        the offset known before, when the service does not answer (a restart:
        one more fruitless try)."""
        held = yield from self._offset(url, part, unknown=-1)
        for _ in range(MAX_SETTLE_LOOKS):
            if held is None or held < 0:
                break
            yield Pause(SETTLE_SECONDS)
            again = yield from self._offset(url, part, unknown=-1)
            if again == held:
                break
            held = again
        return last if held is not None and held < 0 else held

    def _create(self, part: Part) -> Steps[str]:
        metadata = "filename " + base64.b64encode(part.name.encode()).decode("ascii")
        if part is self.parts[0]:  # the model: checked by the PATCH that finishes it, which answers its refusal
            metadata += ",part " + base64.b64encode(b"model").decode("ascii")
        call = Call("POST", "/uploads", tus_headers(**{"Upload-Length": str(part.size), "Upload-Metadata": metadata}))
        answer = yield from self._asked(call)
        if self.automatic and status_of(answer) in (404, 405):
            raise ResumableUnsupported()
        if isinstance(answer, httpx.Response) and answer.status_code == 201 and answer.headers.get("Location"):
            location = answer.headers["Location"]
            followed = on_origin(self.service, location)
            if followed is None:
                raise CrossOriginURL(origin_of(httpx.URL(self.service)), location, "the Location of POST /uploads")
            return followed
        raise failure(answer)

    def _send(self, part: Part, url: str, offset: int, before: int, budget: Budget) -> Steps[bool]:
        """PATCH from `offset` until the service holds the whole file (True),
        or False when the upload is gone from the service; within `budget`."""
        stalls = 0
        while offset < part.size:
            length = min(self.patch_bytes, part.size - offset)
            budget.spend(length)
            headers = tus_headers(**{"Upload-Offset": str(offset), "Content-Type": OFFSET_CONTENT_TYPE, "Content-Length": str(length)})
            body = FileSlice(part.path, offset, length, self._telling_from(before + offset, budget))
            answer = yield Call("PATCH", url, headers, body=body)
            assert answer is not None
            status = status_of(answer)
            held: int | None
            if isinstance(answer, httpx.Response) and answer.is_success:
                held = header_int(answer, "Upload-Offset")
                held = offset + length if held is None else held
                asked_wait = None
            elif status in (404, 410):
                return False
            elif status is not None and status not in RETRIED_PATCH and status < 500:
                raise failure(answer)
            else:
                asked_wait = retry_after(answer)
                held = yield from self._settled_offset(url, part, offset)
                if held is None:
                    return False
            if held > offset:
                stalls = 0
            else:
                stalls += 1
                if stalls > MAX_STALLS:
                    raise failure(answer)
            offset = held
            self._tell(before + offset)
            backoff = 0.0 if stalls == 0 else min(MAX_BACKOFF, self.retry.backoff * 2 ** (stalls - 1))
            wait = asked_wait if asked_wait is not None else backoff
            if wait > 0:
                yield Pause(min(wait, self.retry.max_wait))
        return True

    # -- the plumbing

    def _asked(self, call: Call) -> Steps[Answer]:
        """The answer to `call`, asked again after a 503 (per `Retry`) or a
        connection error (the same number of times, after a doubling backoff)."""
        attempt = 0
        while True:
            answer = yield call
            assert answer is not None
            if isinstance(answer, httpx.Response):
                wait = self.retry.delay(answer, attempt)
            else:
                wait = self.retry.backoff * 2**attempt if attempt < self.retry.attempts else None
            if wait is None:
                return answer
            yield Pause(wait)
            attempt += 1

    def _telling_from(self, start: int, budget: Budget) -> Callable[[int], None]:
        """What a PATCH body tells as it reads: the bytes before it, plus those
        read; and what it read to `budget`."""
        counted = 0

        def on_read(read: int) -> None:
            nonlocal counted
            budget.sent += read - counted
            counted = read
            self._tell(start + read)

        return on_read

    def _tell(self, done: int) -> None:
        if self.report is not None:
            self.report(done, self.total)


def retry_after(answer: Answer) -> float | None:
    return retry_after_seconds(answer) if isinstance(answer, httpx.Response) else None


def import_parts(model: Path, name: str, parts: list[tuple[str, Path]]) -> list[Part]:
    """The model (sent as `name`) and each external data file (sent as its location), with their sizes now."""
    return [Part.of(model, name), *(Part.of(file, location) for location, file in parts)]


def chooses_resumable(resumable: bool | None, parts: list[Part], above: int) -> bool:
    """`resumable` as given, or (None) whether the bytes in all are above `above` (0: always)."""
    if resumable is not None:
        return resumable
    return above <= 0 or sum(part.size for part in parts) > above
