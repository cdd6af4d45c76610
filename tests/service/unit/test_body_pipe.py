"""The upload's receiving threads: `BodyPipe` (the loop feeds chunks, one
thread consumes them in order, at most a window of bytes between them) and
`HashThread` (each file's SHA-256 computed in a thread of its own)."""

from __future__ import annotations

import asyncio
import hashlib
import threading

import pytest

from service.imports.sources.body_pipe import BodyPipe
from service.imports.sources.hash_thread import HashThread


class Recorder:
    """A consumer that records what it got and in which thread; may be held."""

    def __init__(self, fail_on: bytes | None = None) -> None:
        self.chunks: list[bytes] = []
        self.threads: set[str] = set()
        self.ended_after: int | None = None
        self.release = threading.Event()
        self.release.set()
        self.fail_on = fail_on

    def consume(self, chunk: bytes) -> None:
        self.release.wait(10)
        self.threads.add(threading.current_thread().name)
        if chunk == self.fail_on:
            raise ValueError("a malformed chunk")
        self.chunks.append(chunk)

    def end(self) -> None:
        self.threads.add(threading.current_thread().name)
        self.ended_after = len(self.chunks)


def test_chunks_are_consumed_in_order_off_the_loop_and_end_runs_last() -> None:
    async def scenario() -> Recorder:
        recorder = Recorder()
        pipe = BodyPipe(recorder.consume, recorder.end, window=64)
        for number in range(200):
            await pipe.feed(b"%d," % number)
        await pipe.finish()
        return recorder

    recorder = asyncio.run(scenario())
    assert recorder.chunks == [b"%d," % number for number in range(200)]
    assert recorder.ended_after == 200
    assert recorder.threads == {"request-body"}


def test_feeding_waits_while_the_window_is_full() -> None:
    async def scenario() -> None:
        recorder = Recorder()
        recorder.release.clear()  # the consumer is stuck on its first chunk
        pipe = BodyPipe(recorder.consume, recorder.end, window=1000)
        for _ in range(10):
            await asyncio.wait_for(pipe.feed(b"x" * 100), 1)  # 1,000 bytes: the window
        blocked = asyncio.ensure_future(pipe.feed(b"y" * 100))
        await asyncio.sleep(0.2)
        assert not blocked.done(), "a feed past the window must wait for the consumer"
        recorder.release.set()
        await asyncio.wait_for(blocked, 5)
        await pipe.finish()
        assert b"".join(recorder.chunks) == b"x" * 1000 + b"y" * 100

    asyncio.run(scenario())


def test_the_consumers_error_is_raised_on_the_loop_and_later_chunks_are_dropped() -> None:
    async def scenario() -> Recorder:
        recorder = Recorder(fail_on=b"bad")
        pipe = BodyPipe(recorder.consume, recorder.end, window=1 << 20)
        with pytest.raises(ValueError, match="malformed"):
            for chunk in [b"a", b"bad", *[b"c"] * 1000]:
                await pipe.feed(chunk)
                await asyncio.sleep(0)
            await pipe.finish()
        pipe.abort()
        return recorder

    recorder = asyncio.run(scenario())
    assert recorder.chunks == [b"a"]
    for _ in range(100):  # end runs in the thread, after the queue drained
        if recorder.ended_after is not None:
            break
        threading.Event().wait(0.05)
    assert recorder.ended_after == 1


def test_an_abort_drops_what_is_queued_and_still_runs_end() -> None:
    async def scenario() -> Recorder:
        recorder = Recorder()
        recorder.release.clear()
        pipe = BodyPipe(recorder.consume, recorder.end, window=1 << 20)
        for _ in range(50):
            await pipe.feed(b"z")
        pipe.abort()
        recorder.release.set()
        return recorder

    recorder = asyncio.run(scenario())
    for _ in range(100):
        if recorder.ended_after is not None:
            break
        threading.Event().wait(0.05)
    assert recorder.ended_after is not None and recorder.ended_after <= 1  # at most the chunk being consumed


def test_a_stop_returns_once_end_has_run() -> None:
    """A request refused mid-body answers only after the thread closed its
    file (`end`): its bytes are freed with its work folder, before the answer."""

    async def scenario() -> tuple[Recorder, int | None]:
        recorder = Recorder(fail_on=b"bad")
        recorder.release.clear()  # the thread is in the middle of a write
        pipe = BodyPipe(recorder.consume, recorder.end, window=1 << 20)
        for chunk in (b"bad", b"z", b"z"):
            await pipe.feed(chunk)
        asyncio.get_running_loop().call_later(0.2, recorder.release.set)
        await pipe.stop()  # its error is not raised: the request's own error goes on
        return recorder, recorder.ended_after

    recorder, ended_at_stop = asyncio.run(scenario())
    assert ended_at_stop == 0  # end had run when stop returned; the chunks after the error were dropped
    assert recorder.chunks == []


def test_the_hash_thread_gives_one_digest_per_file() -> None:
    files = [bytes(range(256)) * 4000, b"", b"onnx" * 100_000]
    hasher = HashThread(window=64 << 10)  # smaller than a file: update waits for the thread now and then
    try:
        digests = []
        for data in files:
            view = memoryview(data)
            for start in range(0, len(data), 10_000):
                hasher.update(view[start : start + 10_000])
            digests.append(hasher.hexdigest())
    finally:
        hasher.close()
    assert digests == [hashlib.sha256(data).hexdigest() for data in files]
