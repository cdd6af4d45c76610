"""The service in the test process, over httpx's ASGI transport: for API
behaviour, which needs the real app and the real workers but no socket and
no process of its own.

`AsgiService` is `create_app(settings)` with its real sandbox (the fork
server a child of this process, its workers walled as in production), the
app's lifespan run on an event loop in a thread of its own (the few lines of
ASGI's lifespan protocol: `lifespan.startup`, later `lifespan.shutdown`), and
every request handed to `httpx.ASGITransport` on that loop. Its clients:

- `client()`: an `httpx.Client` (its `transport()`), for synchronous tests,
  from any number of threads at once (each request a task on the loop);
- `async_client()`: an `httpx.AsyncClient` (its `async_transport()`), from a
  test's own event loop;
- `transport()` and `async_transport()` for `service.client`'s `Client` and
  `AsyncClient` (`Client(server.url, transport=server.transport())`);
- `streamed(path, consume)`: a GET whose body is handed over chunk by chunk
  as the app sends it, never collected (a tensor of gigabytes).

A request body is streamed, never read whole first: the app pulls each chunk
as it reads (a sync client's iterator in a thread, an async client's on its
own loop), so a refusal before the body is read ends the request as it would
on a connection. The response body is collected whole (`httpx.ASGITransport`
does so; `streamed` excepted), then handed to the caller; the transport sends `http.disconnect`
once the response is complete, as a connection closed after it would. What
this cannot show is a server's or a connection's own behaviour: timeouts on
the wire, a client that leaves, sendfile, a body cut mid-response, several
front ends, signals (support.in_process_service serves the same app on a
loopback port; support.service_harness starts real processes).

What it shares with the other services the tests start (its store, fleet
mode on a both_stores module's [fleet] round, `stored_contents()`) is
`support.service_harness.ServiceUnderTest`; `url` is a name no socket
answers, for the clients' base URL and absolute links only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import multiprocessing.forkserver
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from service.app import create_app
from service.settings import Settings, load_settings
from support import service_harness
from support.faults import FAULTS_VARIABLE, FaultPlan, Faults
from support.service_harness import ServiceUnderTest

ASGI_URL = "http://service.test"  # no socket answers it: every request goes through the transport
# A request that takes longer than this (an import whose worker sleeps, a smoke run) is a failed test, never a hang.
REQUEST_SECONDS = 300.0
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]  # status, headers, body: what crosses back to the caller's thread or loop


def settings_in_process(service: ServiceUnderTest, env: dict[str, str]) -> Settings:
    """The settings of `service` run in the test process: its store and data
    root, one front end on the loopback, on the session's fleet store in
    fleet mode (the S3 client's credentials and endpoint put in this
    process's environment, as a process is given them), its own arguments
    and the variables of `env`."""
    argv = ["--host", "127.0.0.1", "--store", str(service.store), "--data-root", str(service.data_root), "--http-workers", "1"]
    if fleet := service.fleet_arguments():
        argv += fleet
        os.environ.update(service_harness.FLEET.environ)
    return load_settings([*argv, *service.args], environ=env)


def app_in_process(settings: Settings, env: dict[str, str]) -> Any:
    """The app of those settings: with test faults when `env` asks for them (support.faults)."""
    return Faults(FaultPlan.from_environ(env)).app(settings) if FAULTS_VARIABLE in env else create_app(settings)


_HOLDERS = [0]  # how many services of this process run (here or in support.in_process_service)
_HOLDERS_LOCK = threading.Lock()


def fork_server_held() -> None:
    """A service of this process starts: it may start multiprocessing's fork server, or share the running one."""
    with _HOLDERS_LOCK:
        _HOLDERS[0] += 1


def fork_server_released() -> None:
    """A service of this process stopped; the last one stops the fork server.

    multiprocessing's fork server is one per process, kept once started, and
    every `Sandbox` of the process forks its workers from it. Left running, the
    next module's service would use one started for another service's settings
    (seen: a --worker-memory 128MiB service's imports failing as out of memory
    after a module whose checks ran onnxruntime). Stopped once no service of
    the process runs, the next one starts its own, as a service process does.
    While one still runs it stays: its workers die with it."""
    with _HOLDERS_LOCK:
        _HOLDERS[0] -= 1
        if _HOLDERS[0] == 0:
            multiprocessing.forkserver._forkserver._stop()  # type: ignore[attr-defined]


class AsgiService(ServiceUnderTest):
    def __init__(self, store: Path, data_root: Path, *args: str, env: dict[str, str] | None = None) -> None:
        super().__init__(store, data_root, *args)
        self.env = env or {}  # the service's variables (and support.faults' ONNX_TEST_FAULTS): none unless given
        self.app: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._asgi: httpx.ASGITransport | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None
        self._started: concurrent.futures.Future[None] = concurrent.futures.Future()
        # a sync client's body chunks are pulled here, never on the loop (a generator may sleep, as a slow client does)
        self._pullers = concurrent.futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="asgi-body")
        self._gc_threshold = gc.get_threshold()
        self._holding = False  # counted in fork_server_held()

    @property
    def url(self) -> str:
        return ASGI_URL

    def start(self, timeout: float = 60.0) -> AsgiService:
        settings = settings_in_process(self, self.env)
        fork_server_held()
        self._holding = True
        try:
            self.app = app_in_process(settings, self.env)
        except BaseException:
            self.stop()
            raise
        self._asgi = httpx.ASGITransport(app=self.app)
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), name="asgi-service", daemon=True)
        self._thread.start()
        try:
            self._started.result(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    async def _serve(self) -> None:
        """The app's lifespan: started, then held until `stop()`, then shut down (ASGI's lifespan protocol)."""
        self.loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        started: asyncio.Future[None] = self.loop.create_future()
        stopped: asyncio.Future[None] = self.loop.create_future()

        async def receive() -> dict[str, Any]:
            return await inbox.get()

        async def send(message: dict[str, Any]) -> None:
            kind = message["type"]
            if kind == "lifespan.startup.complete":
                started.set_result(None)
            elif kind == "lifespan.startup.failed":
                started.set_exception(RuntimeError(f"the app's lifespan failed to start: {message.get('message', '')}"))
            elif kind == "lifespan.shutdown.complete":
                stopped.set_result(None)
            elif kind == "lifespan.shutdown.failed":
                stopped.set_exception(RuntimeError(f"the app's lifespan failed to stop: {message.get('message', '')}"))

        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        inbox.put_nowait({"type": "lifespan.startup"})
        lifespan = asyncio.create_task(self.app(scope, receive, send))
        try:
            await asyncio.wait([started, lifespan], return_when=asyncio.FIRST_COMPLETED)
            if not started.done():  # the app returned or raised before it said it had started
                lifespan.result()
                raise RuntimeError("the app's lifespan ended before it started")
            started.result()
        except BaseException as error:
            self._started.set_exception(error)
            if not lifespan.done():
                lifespan.cancel()
            return
        self._started.set_result(None)
        await self._stopping.wait()
        inbox.put_nowait({"type": "lifespan.shutdown"})
        await lifespan
        stopped.result()

    def stop(self) -> None:
        if self._thread is not None:
            if self.loop is not None and self._stopping is not None and self._started.done() and self._started.exception() is None:
                self.loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(60)
            assert not self._thread.is_alive(), "the ASGI service did not stop within 60 s"
        self._thread = None
        self._pullers.shutdown(wait=False, cancel_futures=True)
        if self._holding:
            self._holding = False
            fork_server_released()
        # The app's start-up tunes the collector for a long-lived server (gc.freeze, rarer
        # collections): the test process gets back what it had.
        gc.unfreeze()
        gc.set_threshold(*self._gc_threshold)

    async def _answer(self, request: httpx.Request) -> Answer:
        """`request` through httpx's ASGI transport, on the service's loop; the body as sent (not decoded)."""
        assert self._asgi is not None
        response = await self._asgi.handle_async_request(request)
        body = b"".join([part async for part in response.stream])  # type: ignore[union-attr]
        return response.status_code, response.headers.raw, body

    def streamed(self, path: str, consume: Callable[[bytes], None], headers: dict[str, str] | None = None) -> tuple[int, httpx.Headers]:
        """GET `path`, each chunk of the response body handed to `consume` as
        the app sends it and not kept (for a body of gigabytes, which a
        `client()` would collect whole); the status and headers."""
        assert self.loop is not None, "the ASGI service is not started"
        streaming = asyncio.run_coroutine_threadsafe(
            self._streamed(httpx.Request("GET", self.url + path, headers=headers), consume), self.loop
        )
        return streaming.result(REQUEST_SECONDS)

    async def _streamed(self, request: httpx.Request, consume: Callable[[bytes], None]) -> tuple[int, httpx.Headers]:
        """`request` (a GET) to the app, with the scope httpx's ASGI transport would give it."""
        url = request.url
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": request.method,
            "headers": [(name.lower(), value) for name, value in request.headers.raw], "scheme": url.scheme,
            "path": url.path, "raw_path": url.raw_path.split(b"?")[0], "query_string": url.query,
            "server": (url.host, url.port), "client": ("127.0.0.1", 123), "root_path": "",
        }  # fmt: skip
        started: list[dict[str, Any]] = []
        requested = False
        complete = asyncio.Event()

        async def receive() -> dict[str, Any]:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await complete.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                started.append(message)
            elif message["type"] == "http.response.body":
                consume(bytes(message.get("body", b"")))
                if not message.get("more_body", False):
                    complete.set()

        await self.app(scope, receive, send)
        assert started and complete.is_set(), "the app ended without a whole response"
        return started[0]["status"], httpx.Headers(started[0].get("headers", []))

    def _on_loop(self, request: httpx.Request) -> concurrent.futures.Future[Answer]:
        assert self.loop is not None, "the ASGI service is not started"
        return asyncio.run_coroutine_threadsafe(self._answer(request), self.loop)

    def transport(self) -> httpx.BaseTransport:
        """A synchronous transport to the app (for `httpx.Client`, `service.client.Client`)."""
        return _SyncBridge(self)

    def async_transport(self) -> httpx.AsyncBaseTransport:
        """An asynchronous transport to the app from any event loop (for `httpx.AsyncClient`, `service.client.AsyncClient`)."""
        return _AsyncBridge(self)

    def client(self, **kwargs: Any) -> httpx.Client:
        kwargs.setdefault("timeout", 60)
        return httpx.Client(base_url=self.url, transport=self.transport(), **kwargs)

    def async_client(self, **kwargs: Any) -> httpx.AsyncClient:
        kwargs.setdefault("timeout", 60)
        return httpx.AsyncClient(base_url=self.url, transport=self.async_transport(), **kwargs)


def _forwarded(request: httpx.Request, stream: httpx.AsyncByteStream) -> httpx.Request:
    return httpx.Request(request.method, request.url, headers=request.headers, stream=stream, extensions=request.extensions)


def _response(answer: Answer) -> httpx.Response:
    status, headers, body = answer
    return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body))  # as sent: the client decodes it


class _PulledInThreads(httpx.AsyncByteStream):
    """A sync client's body, each chunk taken from its iterator in a thread as the app reads."""

    def __init__(self, stream: httpx.SyncByteStream, pullers: concurrent.futures.Executor) -> None:
        self.stream = stream
        self.pullers = pullers

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = iter(self.stream)
        loop = asyncio.get_running_loop()
        while (chunk := await loop.run_in_executor(self.pullers, next, chunks, None)) is not None:
            if chunk:
                yield chunk


class _SyncBridge(httpx.BaseTransport):
    def __init__(self, service: AsgiService) -> None:
        self.service = service

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        stream = request.stream
        if not isinstance(stream, httpx.ByteStream):  # bytes in memory are passed as they are
            assert isinstance(stream, httpx.SyncByteStream)
            stream = _PulledInThreads(stream, self.service._pullers)
        answer = self.service._on_loop(_forwarded(request, stream))
        try:
            return _response(answer.result(REQUEST_SECONDS))
        except concurrent.futures.TimeoutError:
            answer.cancel()
            raise httpx.ReadTimeout(f"no answer from the app within {REQUEST_SECONDS} s", request=request) from None


class _PulledFromLoop(httpx.AsyncByteStream):
    """An async client's body, each chunk taken from its iterator on the client's own loop."""

    def __init__(self, stream: httpx.AsyncByteStream, loop: asyncio.AbstractEventLoop) -> None:
        self.stream = stream
        self.loop = loop

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = aiter(self.stream)
        done = object()

        async def pull() -> Any:
            try:
                return await anext(chunks)
            except StopAsyncIteration:
                return done

        while (chunk := await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(pull(), self.loop))) is not done:
            if chunk:
                yield chunk


class _AsyncBridge(httpx.AsyncBaseTransport):
    def __init__(self, service: AsgiService) -> None:
        self.service = service

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        stream = request.stream
        if not isinstance(stream, httpx.ByteStream):
            assert isinstance(stream, httpx.AsyncByteStream)
            stream = _PulledFromLoop(stream, asyncio.get_running_loop())
        answer = asyncio.wrap_future(self.service._on_loop(_forwarded(request, stream)))
        try:
            return _response(await asyncio.wait_for(answer, REQUEST_SECONDS))
        except TimeoutError:
            raise httpx.ReadTimeout(f"no answer from the app within {REQUEST_SECONDS} s", request=request) from None


@contextlib.contextmanager
def serving_over_asgi(store: Path, data_root: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[AsgiService]:
    """A started ASGI service, stopped on the way out (for fixtures and tests)."""
    service = AsgiService(store, data_root, *args, env=env).start()
    try:
        yield service
    finally:
        service.stop()
