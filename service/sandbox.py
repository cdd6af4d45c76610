"""The worker sandbox: one fresh, limited process per import.

Owns `Sandbox`: a multiprocessing fork server started once (with `importer`
and `service.worker` preloaded, so a worker does not pay Python's start-up),
`run` (blocking; called from a thread) which forks one worker per job,
kills it at the wall-clock deadline, receives the byte streams its header
announces into the files the caller names, and classifies how it ended:

- a result, an import error, or the worker's own report of a MemoryError;
- death by SIGXCPU (the soft CPU limit), by SIGKILL after at least the hard
  CPU limit of wall time (the hard CPU limit), or our kill at the deadline:
  `ResourceLimit`, with the limit named;
- any other death (a signal, a non-zero exit, a broken result): `WorkerCrashed`.
The worker sets its limits itself (`service.worker.main`); no preexec_fn.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from service import worker
from service.memory_watch import EXIT_MEMORY
from service.settings import Settings
from service.worker_protocol import CHUNK_BYTES, MAX_HEADER_BYTES, ImportFailure, WorkerHeader, WorkerJob

log = logging.getLogger("service.sandbox")
EXIT_GRACE_SECONDS = 1.0


class WorkerProtocolError(Exception):
    """The worker's frames do not follow the protocol."""


@dataclass
class WorkerOutcome:
    """How one job ended. `status`: ok, error, resource_limit or crashed."""

    status: Literal["ok", "error", "resource_limit", "crashed"]
    header: WorkerHeader | None = None
    error: ImportFailure | None = None
    limit: str | None = None
    detail: str = ""
    seconds: float = 0.0


class Sandbox:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.context = multiprocessing.get_context("forkserver")
        self.isolation = "unknown"

    def start(self) -> None:
        """Start the fork server (preloaded) and check a worker can run."""
        self.context.set_forkserver_preload(["importer", "service.worker"])
        self.isolation = self.probe(timeout=30.0)
        if self.isolation == "unavailable":
            log.warning("network isolation unavailable: workers run without a network namespace of their own")
        else:
            log.info("workers run in their own network namespace (%s)", self.isolation)

    def job(self, task: Literal["import", "graph", "probe"], **details: object) -> WorkerJob:
        """A job with this service's limits."""
        limits = WorkerJob(task, self.settings.worker_memory, self.settings.worker_cpu_seconds, self.settings.max_external_files)
        return replace(limits, **details)  # type: ignore[arg-type]

    def probe(self, timeout: float = 5.0) -> str:
        """Fork one worker that only sets its limits and answers; its isolation."""
        reader, writer = self.context.Pipe(duplex=False)
        process = self.context.Process(target=worker.main, args=(writer, self.job("probe")), daemon=True)
        process.start()
        writer.close()
        try:
            if not reader.poll(timeout):
                raise RuntimeError("the probe worker did not answer")
            header = WorkerHeader.model_validate_json(reader.recv_bytes(1 << 16))
        finally:
            reader.close()
            _kill(process)
            process.join(timeout)
        return header.isolation

    def run(self, job: WorkerJob, destinations: list[Path]) -> WorkerOutcome:
        """Run `job` in a fresh worker; the streams of an ok answer are written
        to `destinations`, one file each, in order."""
        started = time.monotonic()
        reader, writer = self.context.Pipe(duplex=False)
        process = self.context.Process(target=worker.main, args=(writer, job), daemon=True)
        process.start()
        writer.close()
        deadline_hit = threading.Event()

        def on_deadline() -> None:
            deadline_hit.set()
            _kill(process)

        timer = threading.Timer(self.settings.worker_timeout, on_deadline)
        timer.daemon = True
        timer.start()
        outcome: WorkerOutcome | None = None
        broken = ""
        try:
            outcome = _receive(reader, destinations)
        except EOFError:
            broken = "the worker ended without a complete result"
        except (OSError, ValueError, ValidationError, WorkerProtocolError) as error:
            broken = f"the worker's result was broken: {str(error)[:200]}"
        finally:
            reader.close()
            timer.cancel()
        if outcome is not None and not broken:
            process.join(max(0.1, self.settings.worker_timeout - (time.monotonic() - started)))
        elif not deadline_hit.is_set():
            process.join(EXIT_GRACE_SECONDS)  # a worker that broke off is usually exiting: see how, rather than kill it
        _kill(process)
        process.join()
        seconds = time.monotonic() - started
        if outcome is None or broken:
            outcome = self._classify_death(process.exitcode, deadline_hit.is_set(), seconds, broken)
        outcome.seconds = seconds
        return outcome

    def _classify_death(self, exitcode: int | None, deadline: bool, seconds: float, broken: str) -> WorkerOutcome:
        cpu = self.settings.worker_cpu_seconds
        if deadline:
            return WorkerOutcome(
                "resource_limit", limit="time", detail=f"the import ran past the {self.settings.worker_timeout:g} s deadline"
            )
        if exitcode == -signal.SIGXCPU or (exitcode == -signal.SIGKILL and seconds >= cpu + 1):
            return WorkerOutcome("resource_limit", limit="cpu", detail=f"the import used more than {cpu} s of CPU time")
        if exitcode == EXIT_MEMORY:
            return WorkerOutcome(
                "resource_limit", limit="memory", detail=f"the import needed more than {self.settings.worker_memory} bytes of memory"
            )
        if exitcode is not None and exitcode < 0:
            how = (
                f"was killed by {signal.Signals(-exitcode).name}"
                if -exitcode in signal.Signals._value2member_map_
                else f"died by signal {-exitcode}"
            )
        else:
            how = f"exited with status {exitcode}"
        return WorkerOutcome("crashed", detail=f"the import worker {how}" + (f" ({broken})" if broken and exitcode == 0 else ""))


def _kill(process: multiprocessing.process.BaseProcess) -> None:
    if process.exitcode is None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            process.kill()


def _receive(reader: Connection, destinations: list[Path]) -> WorkerOutcome:
    header = WorkerHeader.model_validate_json(reader.recv_bytes(MAX_HEADER_BYTES))
    if header.status == "error":
        if header.error is None:
            raise WorkerProtocolError("an error without its description")
        return WorkerOutcome("error", header=header, error=header.error)
    if header.status == "resource_limit":
        return WorkerOutcome("resource_limit", header=header, limit=header.limit, detail="the import ran out of memory")
    if header.status != "ok":
        raise WorkerProtocolError(f"unexpected status {header.status!r}")
    if len(header.streams) != len(destinations) or any(length < 0 for length in header.streams):
        raise WorkerProtocolError("the announced streams do not match the task")
    for path, length in zip(destinations, header.streams, strict=True):
        _receive_file(reader, path, length)
    return WorkerOutcome("ok", header=header)


def _receive_file(reader: Connection, path: Path, length: int) -> None:
    """Write `length` bytes arriving in frames of at most CHUNK_BYTES to `path`
    (made durable by the store's commit); an empty stream makes no file."""
    if length == 0:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        remaining = length
        while remaining > 0:
            frame = reader.recv_bytes(CHUNK_BYTES)
            if len(frame) > remaining:
                raise WorkerProtocolError("more bytes than announced")
            view = memoryview(frame)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            remaining -= len(frame)
    finally:
        os.close(fd)
