"""The synchronous client: `Client(url, token=None)` over `httpx.Client`.

Owns the blocking methods, one per route of docs/http-api.md: `import_file`
(one multipart POST, or resumable uploads above `resumable_above` bytes:
`service.client.resumable`, run here with blocking sends and sleeps),
`import_path`, `recheck` (check stages run again on a stored model),
`models`, `summary`, `graph` (and `graph_bytes`, as sent),
`diagnostics` (the findings, paged) and `diagnostics_report` (SARIF or
JUnit), `tensors` (a paged iterator), `tensor` (a `numpy.ndarray` read from
the `.npy` form), `tensor_bytes` (streamed chunks) and `delete`. Uploads and
downloads report their progress to a `progress=` callback. Every error
answer raises `ServiceError`; a 503 and a failed connection are retried per
`Retry` (`service.client.retry`, each retry told to `on_retry=`). `service.client.aio` is its asynchronous twin.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx
import numpy as np

from service.client._common import (
    DEFAULT_TIMEOUT,
    Checks,
    Dims,
    ExternalData,
    Json,
    PathLike,
    check_params,
    diagnostics_params,
    diff_params,
    diff_path,
    headers_for,
    joined_diff,
    kept_on_origin,
    model_path,
    naming_fields,
    next_page,
    open_parts,
    tensor_params,
    tensor_path,
    upload_parts,
)
from service.client.progress import ProgressOption, Tally, reporting
from service.client.resumable import (
    RESUMABLE_ABOVE,
    Answer,
    Call,
    Pause,
    ResumableImport,
    ResumableUnsupported,
    Steps,
    chooses_resumable,
    import_parts,
    read_slice,
)
from service.client.resume_store import ResumeStore
from service.client.retry import Attempts, OnRetry, Outcome, Retry

T = TypeVar("T")


class Client:
    """A connection pool to one service. Use it in a `with` block (or call
    `close()`): `with Client("http://127.0.0.1:8000", token=...) as client: ...`.

    `resumable_above`: the bytes in all (model and external data) above which
    `import_file` uploads resumably by default (0: always); `resume_store`:
    the folder of the unfinished uploads' state (default under
    `$XDG_CACHE_HOME`, `service.client.resume_store`)."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        retry: Retry | None = None,
        transport: httpx.BaseTransport | None = None,
        resumable_above: int = RESUMABLE_ABOVE,
        resume_store: PathLike | None = None,
        on_retry: OnRetry | None = None,
    ) -> None:
        self.retry = retry or Retry()
        self.on_retry = on_retry
        self.resumable_above = resumable_above
        self.resume_store = ResumeStore(resume_store)
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers_for(token), timeout=timeout, transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- imports

    def import_file(
        self,
        path: PathLike,
        external_data: ExternalData = None,
        *,
        filename: str | None = None,
        resumable: bool | None = None,
        progress: ProgressOption = None,
        checks: Checks = None,
        dim: Dims = None,
        name: str | None = None,
        label: str | None = None,
    ) -> Json:
        """Upload a model file (and its external data files) and return its
        summary. `external_data`: files under the model's folder (each sent
        under its relative path), or a mapping {location: file}.

        `resumable`: True sends each file as a resumable upload (continued
        after a dropped connection, and by a later process after this one was
        killed), False as one multipart request; None (default) chooses by
        size (`resumable_above`). `progress`: a callback `(done_bytes,
        total_bytes)`, or True for a bar on standard error. `checks`: the
        check stages to run (names, or one comma-separated string; default
        the service's), `dim`: {name: value} of the smoke run's symbolic
        dimensions. `name`: the name the service lists the model by (default
        `filename`, the name the file is sent as: its own by default);
        `label`: a short label, such as "v3 fp16"."""
        parts = upload_parts(path, external_data)
        params = check_params(checks, dim)
        naming = naming_fields(name, label)
        filename = filename or Path(path).name
        files = import_parts(Path(path), filename, parts)
        with reporting(progress, name or filename) as report:
            if chooses_resumable(resumable, files, self.resumable_above):
                service = str(self._http.base_url)
                upload = ResumableImport(
                    service, files, self.resume_store, self.retry, report, automatic=resumable is None, params=params, naming=naming
                )
                try:
                    return self._run(upload.steps())
                except ResumableUnsupported:
                    pass  # an older service: one request

            def request() -> Generator[httpx.Request]:
                with contextlib.ExitStack() as opened:
                    tally = Tally(report, sum(file.size for file in files)) if report is not None else None
                    fields = open_parts(opened, path, filename, parts, tally)
                    yield self._http.build_request("POST", "/models", data=naming, files=fields, params=params)

            return self._json(request)

    def import_path(self, name: str, *, checks: Checks = None, dim: Dims = None) -> Json:
        """Import the model at `name`, a path under the service's data root
        (`checks` and `dim` as `import_file`'s)."""
        return self._json(self._one("POST", "/models", json={"path": name}, params=check_params(checks, dim)))

    def recheck(self, model_id: str, *, checks: Checks = None, dim: Dims = None) -> Json:
        """Run check stages again on a stored model (`POST /models/{id}/checks`):
        its summary, whose `checks` and `verdict` are those of the stages just
        run (each stage's entry with its `ran_at`). `checks` and `dim` as
        `import_file`'s."""
        return self._json(self._one("POST", model_path(model_id) + "/checks", params=check_params(checks, dim)))

    # -- reading

    def models(self, *, page_size: int = 100) -> Iterator[Json]:
        """The stored models, newest first, page by page."""
        yield from self._pages("/models", {"limit": str(page_size)})

    def summary(self, model_id: str) -> Json:
        return self._get_json(model_path(model_id))

    def graph(self, model_id: str) -> Json:
        """The resolved graph document (`onnx-service-graph/4`)."""
        return self._get_json(model_path(model_id) + "/graph")

    def diff(self, a: str, b: str, *, page_size: int = 1000) -> Json:
        """What changed from model `a` to model `b` (`onnx-service-diff/1`),
        with every change: the pages of `changes` fetched and joined."""
        pages = [self._get_json(diff_path(a, b), diff_params(page_size, None))]
        while (cursor := next_page(pages[-1])) is not None:
            pages.append(self._get_json(diff_path(a, b), diff_params(page_size, cursor)))
        return joined_diff(pages)

    def graph_bytes(self, model_id: str, *, chunk_size: int = 1 << 16, progress: ProgressOption = None) -> Iterator[bytes]:
        """The graph document's bytes as the service sends them (`progress` as `import_file`'s)."""
        yield from self._chunks(self._one("GET", model_path(model_id) + "/graph"), model_id, chunk_size, progress)

    def diagnostics(self, model_id: str, *, severity: str | None = None, stage: str | None = None, page_size: int = 1000) -> Iterator[Json]:
        """Every finding of the import's check stages (stage by stage, each in
        file order), fetched a page at a time; `severity` ("error" or
        "warning") and `stage` keep one kind."""
        params = {"limit": str(page_size)} | diagnostics_params(severity, stage)
        yield from self._pages(model_path(model_id) + "/diagnostics", params)

    def diagnostics_report(self, model_id: str, format: str = "sarif") -> bytes:
        """The whole check report for CI: SARIF 2.1.0 JSON (format="sarif")
        or JUnit XML (format="junit"), as the service sends it."""
        params = {"format": format}
        return b"".join(self._chunks(self._one("GET", model_path(model_id) + "/diagnostics", params=params), format, 1 << 16, None))

    def tensors(self, model_id: str, *, prefix: str = "", page_size: int = 1000) -> Iterator[Json]:
        """Every tensor entry of a model in file order, fetched a page at a time."""
        params = {"limit": str(page_size)} | ({"prefix": prefix} if prefix else {})
        yield from self._pages(model_path(model_id) + "/tensors", params)

    def tensor(self, model_id: str, name: str, *, field_path: str | None = None, progress: ProgressOption = None) -> np.ndarray[Any, Any]:
        """A tensor's values, read from its `.npy` form (BFLOAT16 as uint16 and
        float8 types as uint8 bit patterns; STRING and 4-bit types: 415)."""
        data = b"".join(self.tensor_bytes(model_id, name, field_path=field_path, format="npy", progress=progress))
        array: np.ndarray[Any, Any] = np.load(io.BytesIO(data), allow_pickle=False)
        return array

    def tensor_bytes(
        self,
        model_id: str,
        name: str,
        *,
        field_path: str | None = None,
        format: str = "raw",
        chunk_size: int = 1 << 16,
        progress: ProgressOption = None,
    ) -> Iterator[bytes]:
        """A tensor's bytes as they arrive: the raw little-endian layout, or
        the `.npy` file with format="npy". `progress` as `import_file`'s."""
        url, params = tensor_path(model_id, name), tensor_params(field_path, format)
        yield from self._chunks(self._one("GET", url, params=params), name, chunk_size, progress)

    def delete(self, model_id: str) -> None:
        with self._stream(self._one("DELETE", model_path(model_id))):
            pass

    # -- the plumbing

    def _run(self, steps: Steps[T]) -> T:
        """Run protocol steps (`service.client.resumable`): each call sent and its answer read, each pause slept."""
        with contextlib.closing(steps):
            answer: Answer | None = None
            while True:
                try:
                    action = steps.send(answer)
                except StopIteration as done:
                    result: T = done.value
                    return result
                if isinstance(action, Pause):
                    time.sleep(action.seconds)
                    answer = None
                else:
                    answer = self._call(action)

    def _call(self, call: Call) -> Answer:
        content = read_slice(call.body) if call.body is not None else None
        request = self._http.build_request(call.method, call.url, headers=call.headers, json=call.json, content=content, params=call.params)
        kept_on_origin(self._http.base_url, request)
        try:
            return self._http.send(request)
        except httpx.TransportError as error:
            return error

    def _one(self, method: str, url: str, **options: Any) -> Callable[[], Generator[httpx.Request]]:
        """A request factory for `_stream`: a new request per attempt."""

        def request() -> Generator[httpx.Request]:
            yield self._http.build_request(method, url, **options)

        return request

    def _chunks(
        self, request: Callable[[], Generator[httpx.Request]], label: str, chunk_size: int, progress: ProgressOption
    ) -> Iterator[bytes]:
        """A successful answer's body as it arrives, its progress told."""
        with reporting(progress, label) as report, self._stream(request) as response:
            total = int(response.headers.get("content-length", "0") or 0)
            for chunk in response.iter_bytes(chunk_size):
                if report is not None:
                    report(response.num_bytes_downloaded, total)
                yield chunk

    def _get_json(self, url: str, params: dict[str, str] | None = None) -> Json:
        return self._json(self._one("GET", url, params=params))

    def _pages(self, url: str, params: dict[str, str]) -> Iterator[Json]:
        while True:
            page = self._get_json(url, params)
            yield from page["items"]
            cursor = next_page(page)
            if cursor is None:
                return
            params = params | {"cursor": cursor}

    def _json(self, request: Callable[[], Generator[httpx.Request]]) -> Json:
        with self._stream(request, read=True) as response:
            body: Json = response.json()
            return body

    @contextlib.contextmanager
    def _stream(self, request: Callable[[], Generator[httpx.Request]], *, read: bool = False) -> Iterator[httpx.Response]:
        """The successful answer to `request` (a generator yielding a fresh
        request per attempt, with its files open), its body read if `read`
        (a read cut off is then retried too), else not yet. Failed attempts
        are retried per `Retry` (`service.client.retry`)."""
        attempts: Attempts | None = None
        while True:
            with contextlib.closing(request()) as requests:
                sent = next(requests)
                outcome = self._attempt(sent, read)
                if isinstance(outcome, httpx.Response) and outcome.is_success:
                    try:
                        yield outcome
                        return
                    finally:
                        outcome.close()
            attempts = attempts or Attempts(self.retry, sent, self.on_retry)
            time.sleep(attempts.wait_after(outcome))

    def _attempt(self, request: httpx.Request, read: bool) -> Outcome:
        """One attempt: the answer (an error answer's body read and the
        answer closed), or the transport error that ended it."""
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError as error:
            return error
        try:
            if read or not response.is_success:
                response.read()
        except httpx.TransportError as error:
            response.close()
            return error
        if not response.is_success:
            response.close()
        return response
