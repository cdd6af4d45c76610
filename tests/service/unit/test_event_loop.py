"""The front end's event loop (`service.server.event_loop.FrontEndLoop`), in process:
an accepted connection's `connection_made`, its request's read and the first
step of the task that answers it run in the turn of its accept (asyncio's own
loop: two, three and four turns later); a request that comes later, a client
that leaves at once, a burst of connections and a failing accept are served
as asyncio serves them."""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from service.server.event_loop import FrontEndLoop

turns: list[tuple[str, int]] = []  # (what, the loop's turn) for the counting loops below


class Recorder(asyncio.Protocol):
    """Notes what happens, in order; answers each chunk with `ok:` and the chunk, from a task of its own."""

    def __init__(self, events: list[str], loop: asyncio.AbstractEventLoop) -> None:
        self.events = events
        self.loop = loop
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.events.append("made")
        self.loop.call_soon(self.events.append, "next turn")  # what connection_made queues runs the turn after it

    def data_received(self, data: bytes) -> None:
        self.events.append(f"data {data.decode()}")
        turns.append(("data", getattr(self.loop, "turn", -1)))
        self.loop.create_task(self.answer(data))  # as uvicorn does: a task per request

    async def answer(self, data: bytes) -> None:
        turns.append(("answer", getattr(self.loop, "turn", -1)))
        assert self.transport is not None
        self.transport.write(b"ok:" + data)

    def eof_received(self) -> bool | None:
        self.events.append("eof")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append("lost")


def served(
    test: Callable[[asyncio.AbstractEventLoop, int, list[str]], Any], loop_class: type[asyncio.AbstractEventLoop] = FrontEndLoop
) -> list[str]:
    """Run `test(loop, port, events)` (a coroutine function) against a server of Recorder protocols on a new loop."""
    events: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: Recorder(events, loop), "127.0.0.1", 0)
        try:
            await test(loop, server.sockets[0].getsockname()[1], events)
        finally:
            server.close()
            await server.wait_closed()

    with asyncio.Runner(loop_factory=loop_class) as runner:
        runner.run(main())
    return events


async def exchange(loop: asyncio.AbstractEventLoop, port: int, message: bytes, *, delay: float = 0.0) -> bytes:
    """A client on a blocking socket in a thread: connect, (wait,) send, read the answer, close."""

    def client() -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            if delay:
                time.sleep(delay)
            sock.sendall(message)
            return sock.recv(1024)

    return await loop.run_in_executor(None, client)


class Counting:
    """A loop that counts its turns and notes the turn of each accept."""

    turn = 0

    def _run_once(self) -> None:
        self.turn += 1
        super()._run_once()  # type: ignore[misc]

    def _accept_connection(self, *args: Any) -> None:
        turns.append(("accept", self.turn))
        super()._accept_connection(*args)  # type: ignore[misc]


class CountingFrontEndLoop(Counting, FrontEndLoop):
    pass


class CountingAsyncioLoop(Counting, asyncio.SelectorEventLoop):
    pass


@pytest.mark.parametrize(
    ("loop_class", "read_after", "answered_after"), [(CountingFrontEndLoop, 0, 0), (CountingAsyncioLoop, 3, 4)], ids=["ours", "asyncio"]
)
def test_a_request_sent_with_the_connection_is_read_and_answered_in_the_turn_of_its_accept(
    loop_class: type[asyncio.AbstractEventLoop], read_after: int, answered_after: int
) -> None:
    """Ours: accepted, read and its task's first step run in one turn; asyncio's own: read three turns later, answered four."""
    events: list[str] = []
    turns.clear()

    async def main() -> bytes:
        loop = asyncio.get_running_loop()
        with socket.create_server(("127.0.0.1", 0)) as listener, socket.create_connection(listener.getsockname()) as client:
            client.sendall(b"hello")  # connected and sent before the server accepts anything
            server = await loop.create_server(lambda: Recorder(events, loop), sock=listener)
            client.setblocking(False)
            try:
                return await asyncio.wait_for(loop.sock_recv(client, 1024), 10)
            finally:
                server.close()
                await server.wait_closed()

    with asyncio.Runner(loop_factory=loop_class) as runner:
        assert runner.run(main()) == b"ok:hello"
    assert events[:1] == ["made"] and "data hello" in events, events
    (_, accepted), (_, read), (_, answered) = turns
    assert (read - accepted, answered - accepted) == (read_after, answered_after), turns


def test_a_request_that_comes_later_is_read_when_it_comes() -> None:
    async def test(loop: asyncio.AbstractEventLoop, port: int, events: list[str]) -> None:
        assert await exchange(loop, port, b"late", delay=0.2) == b"ok:late"

    assert served(test)[:3] == ["made", "next turn", "data late"]


def test_a_client_that_leaves_at_once_is_let_go() -> None:
    async def test(loop: asyncio.AbstractEventLoop, port: int, events: list[str]) -> None:
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
        for _ in range(200):
            if "lost" in events:
                break
            await asyncio.sleep(0.01)

    events = served(test)
    assert events[0] == "made" and "eof" in events and events[-1] == "lost"


def test_a_burst_of_connections_is_served_whole() -> None:
    async def test(loop: asyncio.AbstractEventLoop, port: int, events: list[str]) -> None:
        answers = await asyncio.gather(*(exchange(loop, port, f"{index}".encode()) for index in range(40)))
        assert answers == [f"ok:{index}".encode() for index in range(40)]

    events = served(test)
    assert events.count("made") == 40 and len([event for event in events if event.startswith("data ")]) == 40


def test_an_accept_that_fails_is_asyncios_to_handle() -> None:
    """Out of descriptors: asyncio's own path stops accepting for a while (and tells the exception handler)."""

    class NoDescriptors:
        def accept(self) -> tuple[socket.socket, Any]:
            raise OSError(errno.EMFILE, "Too many open files")

        def fileno(self) -> int:
            return 12345

    async def main() -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        seen: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _, context: seen.append(context))
        removed: list[int] = []
        loop._remove_reader = removed.append  # type: ignore[attr-defined]
        loop._accept_connection(lambda: Recorder([], loop), NoDescriptors())  # type: ignore[attr-defined]
        assert removed == [12345]
        return seen

    with asyncio.Runner(loop_factory=FrontEndLoop) as runner:
        seen = runner.run(main())
    assert [context["message"] for context in seen] == ["socket.accept() out of system resource"]
