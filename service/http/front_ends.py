"""Serving HTTP from one process or several (`--http-workers N`).

Owns `serve(settings, app, log_config)`. One front end: uvicorn serves
`app` in this process. Several: uvicorn's own multiprocess supervisor spawns
N front-end processes, each listening on the port with a socket of its own
(SO_REUSEPORT: the kernel spreads connections evenly, `OwnListener`; only a
process of the same user may join the port, and the import workers run as
another) and running its own app (`app_in_front_end`: the settings parsed
again from the same arguments, made undumpable, its own fork server). What
they share:

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
A front end that dies is replaced; one that fails to start stops the service.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import signal
import socket
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from uvicorn.supervisors.multiprocess import Multiprocess

if TYPE_CHECKING:
    import asyncio

    from fastapi import FastAPI
    from uvicorn.server import ServerState

    from service.http.protocol import HardenedH11Protocol
    from service.settings import Settings

log = logging.getLogger("service")
ARGV_VARIABLE = "ONNX_FRONT_END_ARGV"  # the arguments each front end parses again (JSON list)
SHARED_VARIABLE = "ONNX_FRONT_END_SHARED_DIR"  # the folder of the shared import capacity
METRICS_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


@functools.cache
def _settings() -> Settings:
    from service.settings import load_settings

    return load_settings(json.loads(os.environ[ARGV_VARIABLE]))


def app_in_front_end() -> FastAPI:
    """The app of one of several front ends (uvicorn's factory, in the spawned process)."""
    from service.app import create_app
    from service.observability.log_format import configure_logging
    from service.sandbox.worker.confinement import make_undumpable

    make_undumpable()  # a spawned process is dumpable again
    settings = _settings()
    configure_logging(settings.log_level, settings.log_format)  # a spawned process starts with no handler
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the app's lifespan handles it: a reload asked meanwhile never kills us
    return create_app(settings, shared_dir=Path(os.environ[SHARED_VARIABLE]))


def hardened_protocol(
    config: uvicorn.Config, server_state: ServerState, app_state: dict[str, Any], _loop: asyncio.AbstractEventLoop | None = None
) -> HardenedH11Protocol:
    """uvicorn's `http=` in a front end: the hardened protocol with this service's header deadline."""
    from service.http.protocol import protocol_class

    return protocol_class(_settings().header_timeout)(config, server_state, app_state, _loop)


class FrontEnds(Multiprocess):
    def handle_hup(self) -> None:
        log.info("SIGHUP: passed on to %d front ends", len(self.processes))
        for process in self.processes:
            if process.pid is not None and process.exitcode is None:
                os.kill(process.pid, signal.SIGHUP)


def serve(settings: Settings, app: FastAPI | None, log_config: dict[str, Any]) -> None:
    """Serve until SIGTERM or SIGINT: `app` in this process when
    `--http-workers` is 1, else N spawned front ends."""
    from service.http.protocol import protocol_class

    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        "log_config": log_config,
        "access_log": False,  # service.observability.request_log writes one line per request
    }
    if settings.http_workers == 1:
        assert app is not None
        uvicorn.run(app, http=protocol_class(settings.header_timeout), **common)
        return
    config = uvicorn.Config(
        f"{__name__}:app_in_front_end", factory=True, workers=settings.http_workers, http=f"{__name__}:hardened_protocol", **common
    )
    family, _, _, _, address = socket.getaddrinfo(settings.host, settings.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    reserved = _reuse_port_socket(family)
    try:
        reserved.bind(address)  # bound, never listening: the port stays ours while front ends come and go (and port 0 is resolved)
        host, port = reserved.getsockname()[:2]
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        # uvicorn's own line, which its supervisor would have logged on binding (the front ends do not)
        logging.getLogger("uvicorn.error").info("Uvicorn running on http://%s:%d (Press CTRL+C to quit)", shown, port)
        listener = OwnListener(family, (host, port), config.backlog)
        FrontEnds(config, sockets=[listener]).run()  # type: ignore[list-item]  # uvicorn only passes it on to the spawned process
    finally:
        reserved.close()


def _reuse_port_socket(family: int) -> socket.socket:
    # proto named: asyncio sets TCP_NODELAY only on sockets that say TCP (else a
    # response's head and body, two writes, wait 40 ms for a delayed ACK)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    return sock


def listen_on(family: int, address: tuple[str, int], backlog: int) -> socket.socket:
    """A listening socket of this front end's own on the service's address (SO_REUSEPORT)."""
    sock = _reuse_port_socket(family)
    sock.bind(address)
    sock.listen(backlog)
    return sock


class OwnListener:
    """Stands for the listening socket in a front end's arguments, and
    becomes one of its own when unpickled in the spawned process
    (`listen_on`, SO_REUSEPORT): the kernel then spreads new connections
    evenly over the front ends. One socket shared by all, as uvicorn does,
    lets whichever wakes first accept a whole burst of connections (40
    keep-alive ones for good, measured), leaving the other cores idle."""

    def __init__(self, family: int, address: tuple[str, int], backlog: int) -> None:
        self.family, self.address, self.backlog = family, address, backlog

    def __reduce__(self) -> tuple[Any, tuple[int, tuple[str, int], int]]:
        return (listen_on, (self.family, self.address, self.backlog))


def prepare_shared_state(argv: list[str]) -> Path:
    """Before anything imports prometheus-client: the folder the front ends
    share (import places, metrics), named in the environment they inherit
    with the arguments they parse again (which the sandbox withholds from
    its workers, as it does the database's URL)."""
    shared = Path(tempfile.mkdtemp(prefix="onnx-service-front-ends-"))
    (shared / "metrics").mkdir()
    os.environ[ARGV_VARIABLE] = json.dumps(argv)
    os.environ[SHARED_VARIABLE] = str(shared)
    os.environ[METRICS_VARIABLE] = str(shared / "metrics")
    return shared


def remove_shared_state(shared: Path) -> None:
    shutil.rmtree(shared, ignore_errors=True)
