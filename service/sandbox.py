"""The worker sandbox: one fresh, limited process per import.

Owns `Sandbox`: a multiprocessing fork server started once (with `importer`
and `service.worker` preloaded, so a worker does not pay Python's start-up),
`run` (blocking; called from a thread) which forks one worker per import,
kills it at the wall-clock deadline, receives its frames into files of a work
folder, and classifies how it ended:

- a result, an import error, or the worker's own report of a MemoryError;
- death by SIGXCPU (the soft CPU limit), by SIGKILL after at least the hard
  CPU limit of wall time (the hard CPU limit), or our kill at the deadline:
  `ResourceLimit`, with the limit named;
- any other death (a signal, a non-zero exit, a broken result): `WorkerCrashed`.
The worker sets its limits itself (`service.worker.main`); no preexec_fn.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from service import worker
from service.memory_watch import EXIT_MEMORY
from service.settings import Settings

log = logging.getLogger("service.sandbox")

MAX_HEADER_BYTES = 1 << 30
CHUNK_BYTES = worker.CHUNK_BYTES


class WorkerProtocolError(Exception):
    """The worker's frames do not follow the protocol."""


@dataclass
class ImportJob:
    directory: str  # the worker's working directory (the model's folder)
    model: str  # model file name inside `directory`
    display_name: str  # the name the client knows the model by
    external_dir: str | None = None  # default: the model's folder
    sleep: float = 0.0  # test hook: the worker waits this long before reading
    spin: bool = False  # test hook: ... burning CPU instead of sleeping


@dataclass
class WorkerOutcome:
    """How one import ended. `status`: ok, error, resource_limit or crashed."""

    status: str
    header: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] = field(default_factory=dict)
    limit: str | None = None
    detail: str = ""
    graph_file: Path | None = None
    blob_files: list[Path] = field(default_factory=list)
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

    def _job(self, **extra: Any) -> dict[str, Any]:
        return {
            "memory": self.settings.worker_memory,
            "cpu_seconds": self.settings.worker_cpu_seconds,
            "max_external_files": self.settings.max_external_files,
            **extra,
        }

    def probe(self, timeout: float = 5.0) -> str:
        """Fork one worker that only sets its limits and answers; its isolation."""
        reader, writer = self.context.Pipe(duplex=False)
        process = self.context.Process(target=worker.main, args=(writer, self._job(probe=True)), daemon=True)
        process.start()
        writer.close()
        try:
            if not reader.poll(timeout):
                raise RuntimeError("the probe worker did not answer")
            header = json.loads(reader.recv_bytes(1 << 16))
        finally:
            reader.close()
            _kill(process)
            process.join(timeout)
        return str(header.get("isolation", "unknown"))

    def run(self, job: ImportJob, work_dir: Path) -> WorkerOutcome:
        """Import in a fresh worker; frames go to files in `work_dir`."""
        started = time.monotonic()
        spec = self._job(
            directory=job.directory,
            model=job.model,
            display_name=job.display_name,
            external_dir=job.external_dir,
            sleep=job.sleep,
            spin=job.spin,
        )
        reader, writer = self.context.Pipe(duplex=False)
        process = self.context.Process(target=worker.main, args=(writer, spec), daemon=True)
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
            outcome = _receive(reader, work_dir)
        except EOFError:
            broken = "the worker ended without a complete result"
        except (OSError, ValueError, WorkerProtocolError) as error:
            broken = f"the worker's result was broken: {str(error)[:200]}"
        finally:
            reader.close()
            timer.cancel()
        if outcome is not None and not broken:
            process.join(max(0.1, self.settings.worker_timeout - (time.monotonic() - started)))
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


def _receive(reader: Connection, work_dir: Path) -> WorkerOutcome:
    header = json.loads(reader.recv_bytes(MAX_HEADER_BYTES))
    if not isinstance(header, dict):
        raise WorkerProtocolError("the header is not an object")
    status = header.get("status")
    if status == "error":
        return WorkerOutcome("error", header=header, error=dict(header.get("error") or {}))
    if status == "resource_limit":
        return WorkerOutcome("resource_limit", header=header, limit=str(header.get("limit")), detail="the import ran out of memory")
    if status != "ok":
        raise WorkerProtocolError(f"unknown status {str(status)[:40]!r}")
    graph_length = header.get("graph_length")
    blob_lengths = header.get("blob_lengths")
    if (
        not isinstance(graph_length, int)
        or not isinstance(blob_lengths, list)
        or not all(isinstance(n, int) and n >= 0 for n in blob_lengths)
    ):
        raise WorkerProtocolError("lengths missing")
    graph_file = work_dir / "graph.json"
    _receive_file(reader, graph_file, graph_length)
    blob_files = []
    if blob_lengths:
        (work_dir / "tensors").mkdir()
    for index, length in enumerate(blob_lengths):
        path = work_dir / "tensors" / f"{index}.bin"
        _receive_file(reader, path, length)
        blob_files.append(path)
    return WorkerOutcome("ok", header=header, graph_file=graph_file, blob_files=blob_files)


def _receive_file(reader: Connection, path: Path, length: int) -> None:
    """Write `length` bytes arriving in frames of at most CHUNK_BYTES to `path`
    (made durable by the store's commit)."""
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
