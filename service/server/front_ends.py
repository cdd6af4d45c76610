"""Serving HTTP from one process or several (`--http-workers N`).

Owns `serve(settings, app, log_config)`. One front end: uvicorn serves
`app` in this process. Several: uvicorn's own multiprocess supervisor spawns
N front-end processes, each handed a listening socket of its own, which the
supervisor made (SO_REUSEPORT: the kernel spreads connections evenly,
`OwnListener`; `service.server.listeners` refuses a port another process
serves, and no other service can join the group) and running its own app (`app_in_front_end`: the settings parsed
again from the same arguments, made undumpable, its own fork server; the
app made by the factory the entry point names, `service.app:create_app` for
`python -m service`). What they share:

- the store (every backend already takes several processes: the local
  index's lock is an flock, a fleet's index is PostgreSQL);
- one import capacity: `--workers`, `--queue` and `--max-receiving` hold
  across the front ends (`service.imports.limiter`, open-file-description
  locks in a folder of this service's own, `ONNX_FRONT_END_SHARED_DIR`);
- the metrics: prometheus-client's multiprocess mode
  (`PROMETHEUS_MULTIPROC_DIR`, set here before any front end imports it), so
  any front end's `/metrics` reports every front end's counters; the gauges
  (imports running, store) are read from the shared state.

Signals: SIGTERM and SIGINT stop every front end (each finishes its
requests); SIGHUP is passed on to each, which reloads its key file (a broken
file keeps the keys in force), where uvicorn's supervisor would restart them.
A front end that dies is replaced, on the same socket; one that fails to
start stops the service. Each front end dies with the supervisor (SIGKILL,
`service.sandbox.worker.lifeline`), its fork server and workers with it:
after a `kill -9` of the supervisor no process of it holds the port.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.importer import import_from_string
from uvicorn.supervisors.multiprocess import Multiprocess, Process

if TYPE_CHECKING:
    import asyncio

    from fastapi import FastAPI
    from uvicorn.server import ServerState

    from service.server.h11_protocol import HardenedH11Protocol
    from service.settings import Settings

log = logging.getLogger("service")
ARGV_VARIABLE = "ONNX_FRONT_END_ARGV"  # the arguments each front end parses again (JSON list)
APP_VARIABLE = "ONNX_FRONT_END_APP"  # the app factory each front end calls ("module:function"), set by the entry point
SHARED_VARIABLE = "ONNX_FRONT_END_SHARED_DIR"  # the folder of the shared import capacity
METRICS_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


@functools.cache
def _settings() -> Settings:
    from service.settings import load_settings

    return load_settings(json.loads(os.environ[ARGV_VARIABLE]))


def app_factory(name: str) -> Callable[..., FastAPI]:
    """The app factory named "module:function", called as `service.app.create_app` is: `(settings, shared_dir=...)`."""
    factory: Callable[..., FastAPI] = import_from_string(name)
    return factory


def app_in_front_end() -> FastAPI:
    """The app of one of several front ends (uvicorn's factory, in the spawned process)."""
    from service.observability.log_format import configure_logging
    from service.sandbox.worker.confinement import make_undumpable

    make_undumpable()  # a spawned process is dumpable again
    settings = _settings()
    configure_logging(settings.log_level, settings.log_format)  # a spawned process starts with no handler
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the app's lifespan handles it: a reload asked meanwhile never kills us
    return app_factory(os.environ[APP_VARIABLE])(settings, shared_dir=Path(os.environ[SHARED_VARIABLE]))


def hardened_protocol(
    config: uvicorn.Config, server_state: ServerState, app_state: dict[str, Any], _loop: asyncio.AbstractEventLoop | None = None
) -> HardenedH11Protocol:
    """uvicorn's `http=` in a front end: the hardened protocol with this service's header deadline."""
    from service.server.h11_protocol import protocol_class

    return protocol_class(_settings().header_timeout)(config, server_state, app_state, _loop)


class FrontEnds(Multiprocess):
    """uvicorn's supervisor of front ends, each given the listening socket of
    its place (its replacement too: connections waiting on that socket are
    taken by the next front end, never left without one)."""

    def __init__(self, config: uvicorn.Config, listeners: list[socket.socket]) -> None:
        super().__init__(config, sockets=[])
        self.listeners = listeners

    def start_front_end(self, index: int) -> Process:
        own = OwnListener(self.listeners[index], os.getpid())
        process = Process(self.config, [own])  # type: ignore[list-item]  # uvicorn only passes it on to the spawned process
        process.start()
        return process

    def init_processes(self) -> None:
        self.processes = [self.start_front_end(index) for index in range(self.processes_num)]

    def keep_subprocess_alive(self) -> None:
        """uvicorn's own, but a front end replaced on the socket of the one that died."""
        if self.should_exit.is_set():
            return
        for index, process in enumerate(self.processes):
            if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                continue
            process.kill()  # hung
            process.join()
            if process.exitcode == STARTUP_FAILURE:
                log.error("front end [%s] failed to start: stopping the service", process.pid)
                self.should_exit.set()
                return
            if self.should_exit.is_set():
                return
            log.info("front end [%s] died: replaced", process.pid)
            self.processes[index] = self.start_front_end(index)

    def handle_hup(self) -> None:
        log.info("SIGHUP: passed on to %d front ends", len(self.processes))
        for process in self.processes:
            if process.pid is not None and process.exitcode is None:
                os.kill(process.pid, signal.SIGHUP)


def serve(settings: Settings, app: FastAPI | None, log_config: dict[str, Any], listeners: list[socket.socket]) -> None:
    """Serve on `listeners` (`service.server.listeners`) until SIGTERM or
    SIGINT: `app` in this process when `--http-workers` is 1, else N spawned
    front ends, one listener each."""
    from service.server.h11_protocol import protocol_class

    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        "log_config": log_config,
        "access_log": False,  # service.observability.request_log writes one line per request
        "loop": "service.server.event_loop:FrontEndLoop",  # a new connection's first request served in the turn of its accept
    }
    host, port = listeners[0].getsockname()[:2]
    shown = f"[{host}]" if listeners[0].family == socket.AF_INET6 else host
    # uvicorn's own line, which it logs only where it binds the port itself
    logging.getLogger("uvicorn.error").info("Uvicorn running on http://%s:%d (Press CTRL+C to quit)", shown, port)
    if settings.http_workers == 1:
        assert app is not None
        server = uvicorn.Server(uvicorn.Config(app, http=protocol_class(settings.header_timeout), **common))
        server.run(sockets=listeners)
        if not server.started:
            sys.exit(STARTUP_FAILURE)  # as uvicorn.run does
        return
    config = uvicorn.Config(
        f"{__name__}:app_in_front_end", factory=True, workers=settings.http_workers, http=f"{__name__}:hardened_protocol", **common
    )
    FrontEnds(config, listeners).run()


def adopt_listener(sock: socket.socket, supervisor: int) -> socket.socket:
    """In a spawned front end, first thing: die with the supervisor, then serve on `sock`."""
    from service.sandbox.worker.lifeline import die_with_parent

    die_with_parent(supervisor)
    return sock


class OwnListener:
    """Stands for a front end's listening socket in its arguments, and
    arms its death with the supervisor when unpickled in the spawned process
    (`adopt_listener`), before anything else runs there; the socket itself
    is passed down as a descriptor. One socket per front end (SO_REUSEPORT):
    the kernel spreads new connections evenly over them. One socket shared
    by all, as uvicorn does, lets whichever wakes first accept a whole
    burst of connections (40 keep-alive ones for good, measured), leaving
    the other cores idle."""

    def __init__(self, sock: socket.socket, supervisor: int) -> None:
        self.sock, self.supervisor = sock, supervisor

    def __reduce__(self) -> tuple[Any, tuple[socket.socket, int]]:
        return (adopt_listener, (self.sock, self.supervisor))


def prepare_shared_state(argv: list[str], factory: str) -> Path:
    """Before anything imports prometheus-client: the folder the front ends
    share (import places, metrics), named in the environment they inherit
    with the arguments they parse again (which the sandbox withholds from
    its workers, as it does the database's URL) and the app factory they call."""
    shared = Path(tempfile.mkdtemp(prefix="onnx-service-front-ends-"))
    (shared / "metrics").mkdir()
    os.environ[ARGV_VARIABLE] = json.dumps(argv)
    os.environ[APP_VARIABLE] = factory
    os.environ[SHARED_VARIABLE] = str(shared)
    os.environ[METRICS_VARIABLE] = str(shared / "metrics")
    return shared


def remove_shared_state(shared: Path) -> None:
    shutil.rmtree(shared, ignore_errors=True)
