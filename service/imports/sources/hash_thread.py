"""SHA-256 of a stream of byte runs, computed in a thread of its own.

Owns `HashThread`: `update(view)` queues a run of bytes (a memoryview of an
immutable chunk: nothing is copied) and returns at once, unless `window`
bytes wait already; `hexdigest()` waits for what is queued and returns the
digest of everything since the last `hexdigest()` (then starts anew: one
digest per file of an upload); `wait()` only waits (a resumable upload's
digest, given at the start, goes on with its next request); `close()` ends
the thread. hashlib releases
the GIL while it hashes, so the thread that parses and writes an upload
goes on while this one hashes: on a 2-core machine hashing is the largest
cost of receiving an upload (805 MB: 0.63 s of 1.1 s).
"""

from __future__ import annotations

import hashlib
import queue
import threading

DEFAULT_WINDOW = 8 << 20


class HashThread:
    def __init__(self, digest: hashlib._Hash | None = None, window: int = DEFAULT_WINDOW) -> None:
        self._window = window
        self._runs: queue.SimpleQueue[memoryview | tuple[threading.Event, bool] | None] = queue.SimpleQueue()
        self._waiting = 0  # bytes queued and not yet hashed
        self._room = threading.Condition()
        self._digest = hashlib.sha256() if digest is None else digest
        self._result = ""
        self._thread = threading.Thread(target=self._run, name="request-hash", daemon=True)
        self._thread.start()

    def update(self, view: memoryview) -> None:
        with self._room:
            while self._waiting >= self._window:
                self._room.wait()
            self._waiting += len(view)
        self._runs.put(view)

    def hexdigest(self) -> str:
        self._wait(reset=True)
        return self._result

    def wait(self) -> None:
        self._wait(reset=False)

    def _wait(self, *, reset: bool) -> None:
        done = threading.Event()
        self._runs.put((done, reset))
        done.wait()

    def close(self) -> None:
        self._runs.put(None)

    def _run(self) -> None:
        while (run := self._runs.get()) is not None:
            if isinstance(run, tuple):
                done, reset = run
                if reset:
                    self._result, self._digest = self._digest.hexdigest(), hashlib.sha256()
                done.set()
                continue
            self._digest.update(run)
            with self._room:
                self._waiting -= len(run)
                self._room.notify()
