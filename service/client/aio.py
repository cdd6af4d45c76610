"""The asynchronous client: `AsyncClient(url, token=None)` over
`httpx.AsyncClient`, the twin of `service.client.sync.Client`.

Owns the same methods as coroutines (`tensors`, `models` and `tensor_bytes`
are async iterators); waits between 503 retries with `anyio.sleep`, so it
runs under asyncio or trio. Upload files are read as the request is sent.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import httpx
import numpy as np

from service.client._common import (
    DEFAULT_TIMEOUT,
    ExternalData,
    Json,
    PathLike,
    Retry,
    ServiceError,
    headers_for,
    model_path,
    next_page,
    open_parts,
    tensor_params,
    tensor_path,
    upload_parts,
)


class AsyncClient:
    """`async with AsyncClient("http://127.0.0.1:8000", token=...) as client: ...`"""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        retry: Retry | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retry = retry or Retry()
        self._http = httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers_for(token), timeout=timeout, transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- imports

    async def import_file(self, path: PathLike, external_data: ExternalData = None, *, filename: str | None = None) -> Json:
        """Upload a model file (and its external data files); its summary."""
        parts = upload_parts(path, external_data)
        name = filename or Path(path).name

        def request() -> Generator[httpx.Request]:
            with contextlib.ExitStack() as files:
                yield self._http.build_request("POST", "/models", files=open_parts(files, path, name, parts))

        return await self._json(request)

    async def import_path(self, name: str) -> Json:
        return await self._json(self._one("POST", "/models", json={"path": name}))

    # -- reading

    async def models(self, *, page_size: int = 100) -> AsyncIterator[Json]:
        async for item in self._pages("/models", {"limit": str(page_size)}):
            yield item

    async def summary(self, model_id: str) -> Json:
        return await self._json(self._one("GET", model_path(model_id)))

    async def graph(self, model_id: str) -> Json:
        return await self._json(self._one("GET", model_path(model_id) + "/graph"))

    async def tensors(self, model_id: str, *, prefix: str = "", page_size: int = 1000) -> AsyncIterator[Json]:
        params = {"limit": str(page_size)} | ({"prefix": prefix} if prefix else {})
        async for item in self._pages(model_path(model_id) + "/tensors", params):
            yield item

    async def tensor(self, model_id: str, name: str, *, field_path: str | None = None) -> np.ndarray[Any, Any]:
        chunks = [chunk async for chunk in self.tensor_bytes(model_id, name, field_path=field_path, format="npy")]
        array: np.ndarray[Any, Any] = np.load(io.BytesIO(b"".join(chunks)), allow_pickle=False)
        return array

    async def tensor_bytes(
        self, model_id: str, name: str, *, field_path: str | None = None, format: str = "raw", chunk_size: int = 1 << 16
    ) -> AsyncIterator[bytes]:
        url, params = tensor_path(model_id, name), tensor_params(field_path, format)
        async with self._stream(self._one("GET", url, params=params)) as response:
            async for chunk in response.aiter_bytes(chunk_size):
                yield chunk

    async def delete(self, model_id: str) -> None:
        async with self._stream(self._one("DELETE", model_path(model_id))):
            pass

    # -- the plumbing

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
        async with self._stream(request) as response:
            await response.aread()
            body: Json = response.json()
            return body

    @contextlib.asynccontextmanager
    async def _stream(self, request: Callable[[], Generator[httpx.Request]]) -> AsyncGenerator[httpx.Response]:
        attempt = 0
        while True:
            with contextlib.closing(request()) as requests:
                response = await self._http.send(next(requests), stream=True)
                try:
                    if response.is_success:
                        yield response
                        return
                    await response.aread()
                finally:
                    await response.aclose()
            wait = self.retry.delay(response, attempt)
            if wait is None:
                raise ServiceError.from_response(response)
            await anyio.sleep(wait)
            attempt += 1
