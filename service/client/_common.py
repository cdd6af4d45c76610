"""What the synchronous and asynchronous clients share: the error types, URLs
and the upload's parts.

Owns `ServiceError` (every error answer of the service, or of whatever stands
in front of it, as one exception carrying the problem's members), its
subclass `ClientRefusal` for what the client itself will not do with an
answer (`CrossOriginURL`: a URL to follow on another origin than the
client's; `ResumeBoundExceeded`: a resumable upload that would send more than
its bound), `on_origin` (the origin rule), `check_params` (the `?checks=` and
`?dim=` of an import or a recheck), `retry_after_seconds` (an answer's `Retry-After`), `tensor_path` (a tensor's ONNX name as one
percent-encoded path segment, as docs/http-api.md specifies) and
`upload_parts` (an external data file's location: its path relative to the
model's folder, unless given).
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import operator
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

if TYPE_CHECKING:
    from service.client.progress import Tally

Json = dict[str, Any]
PathLike = str | os.PathLike[str]
ExternalData = Mapping[str, PathLike] | Iterable[PathLike] | None
Checks = Sequence[str] | str | None
Dims = Mapping[str, int] | None
DEFAULT_TIMEOUT = httpx.Timeout(300.0, connect=10.0)
DEFAULT_PORTS = {"http": 80, "https": 443}


class ServiceError(Exception):
    """An error answer: the RFC 9457 problem the service sent (or, from a proxy,
    the status and the start of its body).

    `status` is the HTTP status; `kind` (Malformed, InvalidModel, ...),
    `offset` (a byte offset in the file) and `field_path` are set for refused
    imports; `problem` is the whole problem object.
    """

    def __init__(self, status: int, problem: Json, *, retry_after: float | None = None) -> None:
        self.status = status
        self.problem = problem
        self.kind: str | None = _str_or_none(problem.get("kind"))
        self.detail: str = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
        self.offset: int | None = problem.get("offset") if isinstance(problem.get("offset"), int) else None
        self.field_path: str | None = _str_or_none(problem.get("field_path"))
        self.type: str | None = _str_or_none(problem.get("type"))
        self.title: str | None = _str_or_none(problem.get("title"))
        self.input: str | None = _str_or_none(problem.get("input"))
        self.retry_after = retry_after
        super().__init__(str(self))

    def __str__(self) -> str:
        where = []
        if self.offset is not None:
            where.append(f"at byte {self.offset}")
        if self.field_path:
            where.append(f"in {self.field_path}")
        head = f"{self.status} {self.kind or self.title or 'error'}"
        return f"{head}{' ' + ' '.join(where) if where else ''}: {self.detail}"

    @classmethod
    def from_response(cls, response: httpx.Response) -> ServiceError:
        """The error for an answer whose body has been read."""
        problem: Json
        try:
            parsed = json.loads(response.content)
            problem = parsed if isinstance(parsed, dict) else {"detail": str(parsed)[:500]}
        except ValueError:
            problem = {"detail": response.content[:500].decode("utf-8", "replace")}
        problem.setdefault("status", response.status_code)
        return cls(response.status_code, problem, retry_after=retry_after_seconds(response))


class ClientRefusal(ServiceError):
    """Something the service answered that the client will not act on. No
    HTTP status is the reason: `status` is 0, `kind` names the refusal and
    `problem` is a problem object of the client's making, in the service's
    shape (the command line prints it as it prints the service's)."""

    KIND = "ClientRefusal"
    TITLE = "refused by the client"

    def __init__(self, detail: str, **members: object) -> None:
        super().__init__(0, {"title": self.TITLE, "kind": self.KIND, "status": 0, "detail": detail, **members})

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


class CrossOriginURL(ClientRefusal):
    """A URL the service handed out (an upload's `Location`, or one kept in
    the resume store by an earlier run) on another scheme, host or port than
    the client's base URL: no request, token or byte is sent there.
    `origin` is the client's, `other` the URL's, `url` the URL as given."""

    KIND = "CrossOriginURL"
    TITLE = "a URL on another origin was refused"

    def __init__(self, origin: str, url: str, what: str) -> None:
        self.origin, self.other, self.url = origin, origin_of(httpx.URL(url)), url
        detail = f"{what} is on {self.other}, not on the service's origin {origin}: refused, nothing was sent there"
        super().__init__(detail, origin=origin, other_origin=self.other, url=url)


class ResumeBoundExceeded(ClientRefusal):
    """A resumable upload of one file that would pass its bound: more bytes
    sent than twice the file and one PATCH's, or more PATCH requests than its
    pieces and a number of resumes (a service whose offset goes forward, then
    back). `name`, `size`, `sent` (bytes), `patches` and the two bounds tell
    where it stopped; the upload is kept, for a later run."""

    KIND = "ResumeBoundExceeded"
    TITLE = "a resumable upload passed its bound"

    def __init__(self, why: str, *, name: str, size: int, sent: int, patches: int, max_bytes: int, max_patches: int) -> None:
        self.name, self.size, self.sent, self.patches = name, size, sent, patches
        self.max_bytes, self.max_patches = max_bytes, max_patches
        detail = (
            f"gave up uploading {name!r} ({size:,} bytes) after {patches} PATCH requests sending {sent:,} bytes: {why} "
            f"(at most {max_bytes:,} bytes, twice the file and one PATCH's, and {max_patches} PATCH requests)"
        )
        members = {"name": name, "size": size, "sent": sent, "patches": patches, "max_bytes": max_bytes, "max_patches": max_patches}
        super().__init__(detail, **members)


def origin_of(url: httpx.URL) -> str:
    """`scheme://host:port`, the port written even when it is the scheme's default."""
    port = url.port or DEFAULT_PORTS.get(url.scheme)
    return f"{url.scheme}://{url.host}:{port}"


def on_origin(base: str | httpx.URL, url: str) -> str | None:
    """`url`, a URL the service handed out, as the client may request it:
    a relative one as it is (resolved against the base URL as every request
    is), one naming a host resolved against `base`, kept only if its scheme,
    host and port are the base URL's; None for one on another origin."""
    target = httpx.URL(url)
    if not target.scheme and not target.host:
        return url
    resolved = httpx.URL(base).join(target)
    return str(resolved) if origin_of(resolved) == origin_of(httpx.URL(base)) else None


def kept_on_origin(base: httpx.URL, request: httpx.Request) -> httpx.Request:
    """`request` if it goes to `base`'s origin, else `CrossOriginURL` (what the
    clients check of every request the resumable steps make, however its URL came)."""
    if origin_of(request.url) != origin_of(base):
        raise CrossOriginURL(origin_of(base), str(request.url), f"the URL of a {request.method}")
    return request


def check_params(checks: Checks, dim: Dims) -> httpx.QueryParams:
    """The query of an import or a recheck: `checks` (stage names, or one
    comma-separated string) as one `checks=a,b`; each of `dim` as
    `dim=NAME:VALUE`. The service judges the names and values (400)."""
    params = []
    if checks is not None:
        names = [checks] if isinstance(checks, str) else list(checks)
        if not all(isinstance(name, str) for name in names):
            raise TypeError(f"checks are stage names (strings), not {checks!r}")
        params.append(("checks", ",".join(part.strip() for name in names for part in name.split(",") if part.strip())))
    for name, value in (dim or {}).items():
        params.append(("dim", f"{name}:{operator.index(value)}"))
    return httpx.QueryParams(tuple(params))


def naming_fields(name: str | None, label: str | None) -> dict[str, str]:
    """The name and label an import gives the model, as form fields or JSON
    members (those given only). The service judges them (400: too long, empty,
    a character not printable)."""
    return {field: value for field, value in (("name", name), ("label", label)) if value is not None}


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def retry_after_seconds(response: httpx.Response) -> float | None:
    """`Retry-After` in seconds (delta-seconds or an HTTP date), or None."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def tensor_path(model_id: str, name: str) -> str:
    """The URL path of a tensor: its ONNX name percent-encoded as one segment
    (`/` is %2F, the names `.` and `..` are %2E and %2E%2E, the empty name is
    nothing after the slash)."""
    segment = quote(name, safe="")
    if name in (".", ".."):
        segment = "%2E" * len(name)
    return f"/models/{quote(model_id, safe='')}/tensors/{segment}"


def tensor_params(field_path: str | None, format: str) -> dict[str, str]:
    params = {"format": format} if format != "raw" else {}
    if field_path is not None:
        params["field_path"] = field_path
    return params


def diagnostics_params(severity: str | None, stage: str | None) -> dict[str, str]:
    return ({"severity": severity} if severity else {}) | ({"stage": stage} if stage else {})


def model_path(model_id: str) -> str:
    return f"/models/{quote(model_id, safe='')}"


def upload_parts(model: PathLike, external_data: ExternalData) -> list[tuple[str, Path]]:
    """(location, file) of each external data file. A mapping gives locations
    as they are; otherwise each file goes under its path relative to the
    model's folder (a file outside that folder is a ValueError)."""
    if external_data is None:
        return []
    if isinstance(external_data, Mapping):
        return [(str(location), Path(path)) for location, path in external_data.items()]
    folder = os.path.abspath(os.path.dirname(os.fspath(model)))
    parts = []
    for path in external_data:
        relative = os.path.relpath(os.path.abspath(os.fspath(path)), folder)
        if relative == os.curdir or relative.split(os.sep)[0] == os.pardir:
            raise ValueError(f"{os.fspath(path)!r} is not under the model's folder {folder!r}: pass {{location: path}} instead")
        parts.append((Path(relative).as_posix(), Path(path)))
    return parts


Field = tuple[str, tuple[str, Any, str]]


def open_parts(
    files: contextlib.ExitStack, model: PathLike, name: str, parts: list[tuple[str, Path]], tally: Tally | None = None
) -> list[Field]:
    """The multipart fields of an upload, each file opened in (and closed
    with) `files`; through `tally` when its reads are to be counted."""
    octets = "application/octet-stream"
    named = [("model", name, Path(model)), *(("external_data", location, file) for location, file in parts)]
    opened: list[Field] = []
    for field, filename, path in named:
        file = tally.open(path) if tally is not None else path.open("rb")
        opened.append((field, (filename, files.enter_context(file), octets)))
    return opened


def headers_for(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def diff_path(a: str, b: str) -> str:
    return f"{model_path(a)}/diff/{quote(b, safe='')}"


def diff_params(page_size: int, cursor: str | None) -> dict[str, str]:
    return {"limit": str(page_size)} | ({"cursor": cursor} if cursor else {})


def joined_diff(pages: list[Json]) -> Json:
    """A diff's pages as one document: the first page's head with every page's changes."""
    joined = dict(pages[0])
    joined["changes"] = [change for page in pages for change in page["changes"]]
    joined["next_cursor"] = None
    joined["links"] = {"next": None}
    return joined


def next_page(page: Json) -> str | None:
    cursor = page.get("next_cursor")
    return cursor if isinstance(cursor, str) and cursor else None
