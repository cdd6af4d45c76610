"""The asynchronous client: `AsyncClient(url, token=None)` over
`httpx.AsyncClient`, the twin of `service.client.sync.Client`.

Owns the same methods as coroutines (`tensors`, `models`, `diagnostics`,
`graph_bytes` and `tensor_bytes` are async iterators); retries per the same
`Retry` (`service.client.retry`), waiting with `anyio.sleep`, so it
runs under asyncio or trio. Upload files are read as the request is sent
(a resumable upload's through anyio's file reads, off the event loop);
resumable imports run the steps of `service.client.resumable`, as the
synchronous client does.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import anyio
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
    READ_BYTES,
    RESUMABLE_ABOVE,
    Answer,
    Call,
    FileChanged,
    FileSlice,
    Pause,
    ResumableImport,
    ResumableUnsupported,
    Steps,
    chooses_resumable,
    import_parts,
)
from service.client.resume_store import ResumeStore
from service.client.retry import Attempts, OnRetry, Outcome, Retry

T = TypeVar("T")


class AsyncClient:
    """`async with AsyncClient("http://127.0.0.1:8000", token=...) as client: ...`
    (`resumable_above` and `resume_store` as `Client`'s)."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        retry: Retry | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        resumable_above: int = RESUMABLE_ABOVE,
        resume_store: PathLike | None = None,
        on_retry: OnRetry | None = None,
    ) -> None:
        self.retry = retry or Retry()
        self.on_retry = on_retry
        self.resumable_above = resumable_above
        self.resume_store = ResumeStore(resume_store)
        self._http = httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers_for(token), timeout=timeout, transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- imports

    async def import_file(
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
        """Upload a model file (and its external data files); its summary.
        `resumable`, `progress`, `checks`, `dim`, `name` and `label` as `Client.import_file`'s."""
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
                    return await self._run(upload.steps())
                except ResumableUnsupported:
                    pass  # an older service: one request

            def request() -> Generator[httpx.Request]:
                with contextlib.ExitStack() as opened:
                    tally = Tally(report, sum(file.size for file in files)) if report is not None else None
                    fields = open_parts(opened, path, filename, parts, tally)
                    yield self._http.build_request("POST", "/models", data=naming, files=fields, params=params)

            return await self._json(request)

    async def import_path(self, name: str, *, checks: Checks = None, dim: Dims = None) -> Json:
        return await self._json(self._one("POST", "/models", json={"path": name}, params=check_params(checks, dim)))

    async def recheck(self, model_id: str, *, checks: Checks = None, dim: Dims = None) -> Json:
        """`Client.recheck`'s twin: the stages run again on a stored model; its summary."""
        return await self._json(self._one("POST", model_path(model_id) + "/checks", params=check_params(checks, dim)))

    # -- reading

    async def models(self, *, page_size: int = 100) -> AsyncIterator[Json]:
        async for item in self._pages("/models", {"limit": str(page_size)}):
            yield item

    async def summary(self, model_id: str) -> Json:
        return await self._json(self._one("GET", model_path(model_id)))

    async def graph(self, model_id: str) -> Json:
        return await self._json(self._one("GET", model_path(model_id) + "/graph"))

    async def diff(self, a: str, b: str, *, page_size: int = 1000) -> Json:
        """`Client.diff`'s twin."""
        first: Json = await self._json(self._one("GET", diff_path(a, b), params=diff_params(page_size, None)))
        pages = [first]
        while (cursor := next_page(pages[-1])) is not None:
            pages.append(await self._json(self._one("GET", diff_path(a, b), params=diff_params(page_size, cursor))))
        return joined_diff(pages)

    async def graph_bytes(self, model_id: str, *, chunk_size: int = 1 << 16, progress: ProgressOption = None) -> AsyncIterator[bytes]:
        async for chunk in self._chunks(self._one("GET", model_path(model_id) + "/graph"), model_id, chunk_size, progress):
            yield chunk

    async def diagnostics(
        self, model_id: str, *, severity: str | None = None, stage: str | None = None, page_size: int = 1000
    ) -> AsyncIterator[Json]:
        params = {"limit": str(page_size)} | diagnostics_params(severity, stage)
        async for item in self._pages(model_path(model_id) + "/diagnostics", params):
            yield item

    async def diagnostics_report(self, model_id: str, format: str = "sarif") -> bytes:
        request = self._one("GET", model_path(model_id) + "/diagnostics", params={"format": format})
        return b"".join([chunk async for chunk in self._chunks(request, format, 1 << 16, None)])

    async def tensors(self, model_id: str, *, prefix: str = "", page_size: int = 1000) -> AsyncIterator[Json]:
        params = {"limit": str(page_size)} | ({"prefix": prefix} if prefix else {})
        async for item in self._pages(model_path(model_id) + "/tensors", params):
            yield item

    async def tensor(
        self, model_id: str, name: str, *, field_path: str | None = None, progress: ProgressOption = None
    ) -> np.ndarray[Any, Any]:
        chunks = [chunk async for chunk in self.tensor_bytes(model_id, name, field_path=field_path, format="npy", progress=progress)]
        array: np.ndarray[Any, Any] = np.load(io.BytesIO(b"".join(chunks)), allow_pickle=False)
        return array

    async def tensor_bytes(
        self,
        model_id: str,
        name: str,
        *,
        field_path: str | None = None,
        format: str = "raw",
        chunk_size: int = 1 << 16,
        progress: ProgressOption = None,
    ) -> AsyncIterator[bytes]:
        url, params = tensor_path(model_id, name), tensor_params(field_path, format)
        async for chunk in self._chunks(self._one("GET", url, params=params), name, chunk_size, progress):
            yield chunk

    async def delete(self, model_id: str) -> None:
        async with self._stream(self._one("DELETE", model_path(model_id))):
            pass

    # -- the plumbing

    async def _run(self, steps: Steps[T]) -> T:
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
                    await anyio.sleep(action.seconds)
                    answer = None
                else:
                    answer = await self._call(action)

    async def _call(self, call: Call) -> Answer:
        content = read_slice(call.body) if call.body is not None else None
        request = self._http.build_request(call.method, call.url, headers=call.headers, json=call.json, content=content, params=call.params)
        kept_on_origin(self._http.base_url, request)
        try:
            return await self._http.send(request)
        except httpx.TransportError as error:
            return error

    async def _chunks(
        self, request: Callable[[], Generator[httpx.Request]], label: str, chunk_size: int, progress: ProgressOption
    ) -> AsyncIterator[bytes]:
        with reporting(progress, label) as report:
            async with self._stream(request) as response:
                total = int(response.headers.get("content-length", "0") or 0)
                async for chunk in response.aiter_bytes(chunk_size):
                    if report is not None:
                        report(response.num_bytes_downloaded, total)
                    yield chunk

    def _one(self, method: str, url: str, **options: Any) -> Callable[[], Generator[httpx.Request]]:
        def request() -> Generator[httpx.Request]:
            yield self._http.build_request(method, url, **options)

        return request

    async def _pages(self, url: str, params: dict[str, str]) -> AsyncIterator[Json]:
        while True:
            page = await self._json(self._one("GET", url, params=params))
            for item in page["items"]:
                yield item
            cursor = next_page(page)
            if cursor is None:
                return
            params = params | {"cursor": cursor}

    async def _json(self, request: Callable[[], Generator[httpx.Request]]) -> Json:
        async with self._stream(request, read=True) as response:
            body: Json = response.json()
            return body

    @contextlib.asynccontextmanager
    async def _stream(self, request: Callable[[], Generator[httpx.Request]], *, read: bool = False) -> AsyncGenerator[httpx.Response]:
        """`Client._stream`'s twin: the successful answer, failed attempts retried per `Retry`."""
        attempts: Attempts | None = None
        while True:
            with contextlib.closing(request()) as requests:
                sent = next(requests)
                outcome = await self._attempt(sent, read)
                if isinstance(outcome, httpx.Response) and outcome.is_success:
                    try:
                        yield outcome
                        return
                    finally:
                        await outcome.aclose()
            attempts = attempts or Attempts(self.retry, sent, self.on_retry)
            await anyio.sleep(attempts.wait_after(outcome))

    async def _attempt(self, request: httpx.Request, read: bool) -> Outcome:
        try:
            response = await self._http.send(request, stream=True)
        except httpx.TransportError as error:
            return error
        try:
            if read or not response.is_success:
                await response.aread()
        except httpx.TransportError as error:
            await response.aclose()
            return error
        if not response.is_success:
            await response.aclose()
        return response


async def read_slice(body: FileSlice) -> AsyncIterator[bytes]:
    """The bytes of `body`, `READ_BYTES` at a time, each read in a worker thread."""
    async with await anyio.open_file(body.path, "rb") as file:
        await file.seek(body.offset)
        sent = 0
        while sent < body.length:
            data = await file.read(min(READ_BYTES, body.length - sent))
            if not data:
                raise FileChanged(f"{body.path}: ended at byte {body.offset + sent}, before {body.offset + body.length}")
            sent += len(data)
            body.on_read(sent)
            yield data
