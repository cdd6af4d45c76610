"""The service in the test process: for API behaviour, which needs HTTP and
the real workers but no process of its own.

`InProcessService` is `create_app` served by uvicorn (with the service's own
hardened h11 protocol) in a thread of the test process, on a loopback port,
with the real sandbox: its fork server a child of this process, its workers
walled as in production. No interpreter starts and imports per server. What
it shares with `ServiceProcess` (address, client, store, fleet mode) is
`support.service_harness.ServiceUnderTest`; a test that reads the service's
log, signals it, restarts it or finds its processes wants `ServiceProcess`.
"""

from __future__ import annotations

import contextlib
import gc
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from service.server.h11_protocol import protocol_class
from service.server.listeners import open_listeners
from support.asgi_service import app_in_process, fork_server_held, fork_server_released, settings_in_process
from support.service_harness import ServiceUnderTest


class InProcessService(ServiceUnderTest):
    def __init__(self, store: Path, data_root: Path, *args: str, env: dict[str, str] | None = None) -> None:
        super().__init__(store, data_root, *args)
        self.env = env or {}  # the service's variables, and test faults (support.faults.FaultPlan.env()): none unless given
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._listener: socket.socket | None = None
        self._gc_threshold = gc.get_threshold()
        self._holding = False  # counted in support.asgi_service.fork_server_held()

    def start(self, timeout: float = 60.0) -> InProcessService:
        settings = settings_in_process(self, self.env)
        fork_server_held()
        self._holding = True
        try:
            listener = self._listener = open_listeners(settings.host, 0, 1, backlog=2048)[0]
            self.port = listener.getsockname()[1]
            app = app_in_process(settings, self.env)
            config = uvicorn.Config(app, http=protocol_class(settings.header_timeout), log_config=None, access_log=False)
        except BaseException:
            self.stop()
            raise
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
        # collections): the test process gets back what it had.
        gc.unfreeze()
        gc.set_threshold(*self._gc_threshold)
        if self._holding:
            self._holding = False
            fork_server_released()


@contextlib.contextmanager
def serving_in_process(store: Path, data_root: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[InProcessService]:
    """A started in-process service, stopped on the way out (for fixtures)."""
    service = InProcessService(store, data_root, *args, env=env).start()
    try:
        yield service
    finally:
        service.stop()
