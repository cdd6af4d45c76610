"""The front end's event loop: asyncio's, serving a new connection's first request in the loop turn of its accept.

Owns `FrontEndLoop`, the loop `python -m service` gives uvicorn (`loop=`,
`service.server.front_ends.serve`). A health check, as a kubelet makes it,
opens a new connection each time, and asyncio's own accept walks it through
the loop's turns one step a turn: the turn of `sock.accept()`, then a task
per connection (`_accept_connection2`) which makes the transport, then
`connection_made` and the reader's registration, then the selector reporting
the request's bytes (which came with the connection), then the app's task
for the request. Each turn runs everything else that was ready: under 40
keep-alive connections of tensor GETs (20 a front end) a turn is 5 to 15 ms,
and `/healthz` was answered four turns after its accept (measured per
connection: +1 turn the task, +2 `connection_made`, +3 the request read, +4
the answer written), p99 26 to 40 ms.

Here all of it runs in the accept's own turn, for a plain-TCP listener: the
transport is made at once; what it queued for the next turn
(`connection_made`, the reader's registration) is run at once, in order; the
socket is read without waiting for the selector; and the first step of each
task that read made (uvicorn's task for the request) is run at once too, as
Python 3.12's eager tasks would: `/healthz` is answered before the turn
ends. A request that needs more (a thread, a file) goes on as any task does;
a request not there yet is read when the selector says so, as before;
callbacks that other threads queue meanwhile keep their place; a TLS
listener, and an accept that fails (out of descriptors: asyncio pauses
accepting and tries again), take asyncio's own path. This reaches into
asyncio's selector loop (`_accept_connection`, `_make_socket_transport`, the
queue of the next turn's handles, the transport's `_read_ready`: unchanged
from Python 3.11 to CPython's main branch; tests/service/unit/test_event_loop.py
checks the turns); the protocol (`service.server.h11_protocol`), its deadlines and
flow control are as before.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import socket
from collections.abc import Callable
from typing import Any


class FrontEndLoop(asyncio.SelectorEventLoop):
    """asyncio's selector loop, serving a new connection's first request in the turn of its accept (see the module)."""

    _started: list[asyncio.Task[Any]] | None = None  # the tasks made while a new connection's first read runs

    def create_task(self, coro: Any, **options: Any) -> asyncio.Task[Any]:  # asyncio's, its options passed on
        task = super().create_task(coro, **options)
        if self._started is not None:
            self._started.append(task)
        return task

    def _accept_connection(  # asyncio's private method: its arguments passed on as they are
        self, protocol_factory: Any, sock: socket.socket, sslcontext: Any = None, server: Any = None, backlog: int = 100, *rest: Any
    ) -> None:
        if sslcontext is not None:
            super()._accept_connection(protocol_factory, sock, sslcontext, server, backlog, *rest)  # type: ignore[misc]
            return
        for _ in range(backlog):
            try:
                conn, addr = sock.accept()
                conn.setblocking(False)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return  # nothing more waiting
            except OSError:  # EMFILE and the like: asyncio's own handling, of one more try (it pauses accepting, then tries again)
                super()._accept_connection(protocol_factory, sock, sslcontext, server, 1, *rest)  # type: ignore[misc]
                return
            self._serve_accepted(protocol_factory, conn, addr, server)

    def _serve_accepted(self, protocol_factory: Any, conn: socket.socket, addr: Any, server: Any) -> None:
        """The connection's transport, `connection_made`, its first read and its request's task, all now."""
        queued = len(self._ready)  # type: ignore[attr-defined]
        try:
            protocol = protocol_factory()
            transport = self._make_socket_transport(conn, protocol, extra={"peername": addr}, server=server)  # type: ignore[attr-defined]
        except Exception as error:  # as asyncio's own accept: the connection is dropped, the loop goes on
            conn.close()
            self.call_exception_handler({"message": "no transport for an accepted connection", "exception": error})
            return
        self._run_now(queued, lambda owner: owner is transport or owner is protocol)  # connection_made, the reader's registration
        self._started = []
        try:
            _read_now(transport)
        finally:
            started, self._started = self._started, None
        self._run_now(queued, lambda owner: any(owner is task for task in started))  # the request's task: its first step

    def _run_now(self, queued: int, ours: Callable[[object], bool]) -> None:
        """Run at once, in order, the callbacks queued for the next turn (after the first `queued`) that are `ours`
        (bound to that object); the others, a callback another thread queued meanwhile say, stay where they are."""
        ready: collections.deque[Any] = self._ready  # type: ignore[attr-defined]  # asyncio's handles of the next turn
        now = [handle for handle in itertools.islice(ready, queued, None) if ours(getattr(handle._callback, "__self__", None))]
        for handle in now:
            ready.remove(handle)
        for handle in now:
            if not handle._cancelled:  # as the loop runs it: in its context, an error to the exception handler
                handle._run()


def _read_now(transport: Any) -> None:
    """Read what the client sent already (a request usually comes with the connection), as the selector would."""
    if transport.is_reading() and not transport._conn_lost:
        transport._read_ready()
