"""The service in the test process: for API behaviour, which needs HTTP and
the real workers but no process of its own.

`InProcessService` is `create_app` served by uvicorn (with the service's own
hardened h11 protocol) in a thread of the test process, on a loopback port,
with the real sandbox: its fork server a child of this process, its workers
walled as in production. No interpreter starts and imports per server. It
has the `url`, `client()`, `store`, `data_root` and store inspections of
`ServiceProcess`, and stores on the session's S3 and PostgreSQL in fleet mode
as it does; a test
that reads the service's log, signals it, restarts it or finds its processes
wants `ServiceProcess`.
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import uvicorn

from service.app import create_app
from service.http.listeners import open_listeners
from service.http.protocol import protocol_class
from service.settings import load_settings
from support import service_harness


class InProcessService:
    def __init__(self, store: Path, data_root: Path, *args: str) -> None:
        self.store = store
        self.data_root = data_root
        self.args = list(args)
        self.port = 0
        self.fleet_store: tuple[str, str] | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._listener: socket.socket | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> InProcessService:
        argv = ["--host", "127.0.0.1", "--store", str(self.store), "--data-root", str(self.data_root), "--http-workers", "1"]
        fleet = service_harness.FLEET
        if fleet is not None and not any(arg.startswith("--store") for arg in self.args):
            if self.store not in service_harness.FLEET_STORES:  # as ServiceProcess: one folder, one fleet store
                service_harness.FLEET_STORES[self.store] = (fleet.new_store_url(), fleet.new_database())
            self.fleet_store = service_harness.FLEET_STORES[self.store]
            argv += ["--store", self.fleet_store[0], "--database", self.fleet_store[1], "--cache-dir", str(self.store)]
            os.environ.update(fleet.environ)  # the S3 client's credentials and endpoint, as the process is given them
        settings = load_settings([*argv, *self.args], environ={})
        listener = self._listener = open_listeners(settings.host, 0, 1, backlog=2048)[0]
        self.port = listener.getsockname()[1]
        config = uvicorn.Config(create_app(settings), http=protocol_class(settings.header_timeout), log_config=None, access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [listener]}, name=f"service-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                self.stop()
                raise RuntimeError("the in-process service did not start (its lifespan failed: see the log above)")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the in-process service did not start within {timeout} s")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(30)
            assert not self._thread.is_alive(), "the in-process service did not stop within 30 s"
        self._server = self._thread = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        # The app's start-up tunes the collector for a long-lived server (gc.freeze, rarer
        # collections): the test process goes back to Python's defaults.
        gc.unfreeze()
        gc.set_threshold(700, 10, 10)

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60, **kwargs)  # type: ignore[arg-type]

    def stored_contents(self) -> set[str]:
        return service_harness.stored_contents(self.store, self.fleet_store)

    def content_stored(self, model_id: str) -> bool:
        return model_id in self.stored_contents()

    def temporary_files(self) -> list[Path]:
        """What the service left in its per-process tmp folders."""
        return [p for folder in (self.store / "tmp").iterdir() if folder.is_dir() for p in folder.rglob("*")]


@contextlib.contextmanager
def serving_in_process(store: Path, data_root: Path, *args: str) -> Iterator[InProcessService]:
    """A started in-process service, stopped on the way out (for fixtures)."""
    service = InProcessService(store, data_root, *args).start()
    try:
        yield service
    finally:
        service.stop()
