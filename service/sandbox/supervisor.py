"""The supervisor: one fresh, limited worker process per job, and how it ended.

Owns `Sandbox`: a multiprocessing fork server started once (with `importer`
and the worker's entry and tasks (`service.sandbox.worker.main`, `service.tasks`) preloaded,
so a worker does not pay Python's start-up),
`run` (blocking; called from a thread) which forks one worker per job,
kills it at the wall-clock deadline, receives the byte streams its header
announces into the files the caller names, and classifies how it ended:

- a result, an import error, or the worker's own report of a MemoryError;
- a worker past its memory limit, ended by its own watchdog, killed by the
  front end's (`service.sandbox.memory_watch`) or by the kernel in its memory cgroup
  (`service.sandbox.cgroups`, made for each job where the service may), or aborted by the
  compiled importer's runtime after growing past half of it: `ResourceLimit` (memory);
- death by SIGXCPU (the soft CPU limit), by SIGKILL after at least the hard
  CPU limit of wall time (the hard CPU limit), or our kill at the deadline:
  `ResourceLimit`, with the limit named;
- death by SIGSYS: the worker's seccomp filter stopped a forbidden system
  call (a socket, a program, ptrace, ...): `WorkerCrashed`, saying so;
- any other death (a signal, a non-zero exit, a broken result): `WorkerCrashed`.
A caller that gives `run` an `ExitBeside` has the outcome as soon as the
worker's answer is whole, the worker then ended and reaped in a thread of
its own (the kernel freeing what it held: 0.25 s for 3.3 GiB of
onnxruntime's pre-packed weights), and learns when it is gone (`then`), to
hold the worker's slot until then. Else `run` returns once the worker is gone.
`WorkerOutcome.result` gives the worker's answer, or raises how it ended as a
typed error (`service.errors`: `ImportFailed`, `StoreFull`, `ImportTooLarge`).
The worker puts up its walls itself (`service.sandbox.worker.main.main`, or
the entry the sandbox was made with; no preexec_fn)
and reports what is in effect; `describe_isolation` turns that into
/readyz's `network_isolation` and `worker_sandbox`, which `start` logs
(each wall missing, with a warning).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from service.errors import ImportFailed, ImportTooLarge, StoreFull, is_full
from service.sandbox.cgroups import JobGroups, WorkerCgroups, service_memory_limit
from service.sandbox.environment import secrets_withheld
from service.sandbox.memory_sizing import MemoryBound, WorkerMemory, read_machine_memory, shown_size, size_worker_memory
from service.sandbox.memory_watch import WorkerMemoryWatch
from service.sandbox.protocol import CHUNK_BYTES, MAX_HEADER_BYTES, ImportFailure, StageReport, Task, WorkerHeader, WorkerJob
from service.sandbox.worker import seccomp
from service.sandbox.worker.confinement import LANDLOCK_PREFIX, network_isolation
from service.sandbox.worker.file_broker import READS_EXTERNAL_DATA, serve_requests
from service.sandbox.worker.memory_limit import EXIT_MEMORY
from service.settings import Settings

log = logging.getLogger("service.sandbox")
EXIT_GRACE_SECONDS = 1.0
MAX_WORKER_OUTPUT = 64 << 10  # bytes of a worker's stdout and stderr logged; the rest is counted and dropped
MAX_WORKER_LINES = 200
MAX_LINE_CHARACTERS = 2000
WORKER_ENTRY = "service.sandbox.worker.main:main"  # what a forked worker runs: main(connection, job, output, files)
# The walls /readyz's worker_sandbox lists, in order (a worker reports those in effect).
LAYERS = (
    "user-namespace", "pid-namespace", "ipc-namespace", "mount-namespace", "uts-namespace", "cgroup-namespace",
    "network-namespace", "minimal-root", "unprivileged", "memory-cgroup", "pids-cgroup", "landlock", "seccomp",
)  # fmt: skip


class SandboxUnavailable(RuntimeError):
    """The workers cannot be confined as the settings require."""


class WorkerProtocolError(Exception):
    """The worker's frames do not follow the protocol."""


@dataclass
class WorkerOutcome:
    """How one job ended. `status`: ok, error, resource_limit, crashed, or
    (the front end's side) store_full (no room for the streams) and too_large
    (the streams would pass the bytes allowed)."""

    status: Literal["ok", "error", "resource_limit", "crashed", "store_full", "too_large"]
    header: WorkerHeader | None = None
    error: ImportFailure | None = None
    limit: str | None = None
    detail: str = ""
    seconds: float = 0.0

    def logged(self, task: str, display_name: str) -> str:
        """How the job ended, as the log says it: `import of 'm.onnx': ok in
        1.234 s (fork 0.008, open 0.001, ...)`, with the worker's steps."""
        steps = f" ({self.header.profile()})" if self.header is not None and self.header.steps else ""
        return f"{task} of {display_name[:100]!r}: {self.status} in {self.seconds:.3f} s{steps}"

    def result(self, display_name: str) -> WorkerHeader:
        """The worker's answer if the job succeeded; else the typed error
        (`service.errors`) saying how it ended. `display_name` names the input
        in a failure the worker could not describe itself."""
        if self.status == "ok" and self.header is not None:
            return self.header
        if self.status == "error" and self.error is not None:
            raise ImportFailed(self.error)
        if self.status == "store_full":
            raise StoreFull(self.detail)
        if self.status == "too_large":
            raise ImportTooLarge(self.detail)
        if self.status == "resource_limit":
            raise ImportFailed(ImportFailure(kind="ResourceLimit", message=self.detail, input=display_name), limit=self.limit)
        raise ImportFailed(ImportFailure(kind="WorkerCrashed", message=self.detail, input=display_name))


class WorkerControl:
    """Ends a job's worker from another thread (the request it serves was
    cancelled: its client went): before the worker starts, it is killed as it
    starts; after, at once. The job then ends as a killed worker does."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kill: Callable[[], None] | None = None
        self.ended = False

    def attach(self, kill: Callable[[], None]) -> None:
        with self._lock:
            self._kill = kill
            if self.ended:
                kill()

    def end(self) -> None:
        with self._lock:
            self.ended = True
            if self._kill is not None:
                self._kill()


class ExitBeside:
    """A worker's exit, reaped beside its answer (see the module comment):
    `started` once `run` has answered before the worker was gone; `then(gone)`
    calls `gone` once it is (from the reaping thread, or at once if it is gone
    already). A `run` that did not answer early never starts it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = False
        self._gone = False
        self._then: Callable[[], None] | None = None

    def then(self, gone: Callable[[], None]) -> None:
        with self._lock:
            if not self._gone:
                self._then = gone
                return
        gone()

    def _finished(self) -> None:
        with self._lock:
            self._gone = True
            gone, self._then = self._then, None
        if gone is not None:
            gone()


class Sandbox:
    """`worker` names the function a forked worker runs ("module:function",
    called as `service.sandbox.worker.main.main` is), chosen by the code that
    makes the sandbox: the service's own entry unless another is given."""

    def __init__(self, settings: Settings, worker: str = WORKER_ENTRY) -> None:
        self.settings = settings
        self.worker_module, _, name = worker.partition(":")
        self.worker_entry: Callable[..., None] = getattr(importlib.import_module(self.worker_module), name)
        self.context = multiprocessing.get_context("forkserver")
        self.isolation = "unknown"
        self.cgroups: WorkerCgroups | None = None
        self.memory_bound = MemoryBound(read_machine_memory(), service_memory_limit(), settings.worker_memory_share)

    def worker_memory(self, model_bytes: int, mapped_bytes: int = 0) -> WorkerMemory:
        """The memory cap of a check worker on a model of `model_bytes`, `mapped_bytes` of them external data it binds
        for onnxruntime to map (`service.sandbox.memory_sizing`)."""
        settings = self.settings
        return size_worker_memory(
            model_bytes, settings.worker_memory, settings.worker_memory_per_model_byte, self.memory_bound,
            mapped_bytes, settings.worker_memory_per_mapped_byte,
        )  # fmt: skip

    def start(self) -> None:
        """Start the fork server (preloaded) and check a worker can run."""
        # onnx and onnxruntime (the runtime extra; skipped where missing) load once here, not in every check worker
        # its namespaces first, while it is one thread (numpy's OpenBLAS starts its own)
        preload = ["service.sandbox.worker.fork_server", "importer", "service.sandbox.worker.main", "service.tasks.dispatch"]
        preload += [self.worker_module] if self.worker_module not in preload else []
        preload += ["onnx", "onnxruntime"]
        self.context.set_forkserver_preload(preload)
        self.cgroups = WorkerCgroups.find()
        with secrets_withheld():  # the fork server starts here, and its workers never hold them
            self.isolation = self.probe(timeout=30.0)
        network, layers, abi = describe_isolation(self.isolation)
        if not abi:
            if self.settings.require_landlock:
                raise SandboxUnavailable("--require-landlock: the workers cannot be confined by Landlock here")
            log.warning("Landlock unavailable: workers run without their file policy (the kernel offers none, or refused it)")
        if network == "unavailable":
            log.warning("network isolation unavailable: workers run without a network namespace of their own")
        if "seccomp" not in layers:
            reason = seccomp.UNAVAILABLE_REASON or "the kernel refused the filter"
            log.warning("seccomp unavailable: workers run without their system-call filter (%s)", reason)
        expected = [layer for layer in LAYERS if layer not in ("landlock", "seccomp", "network-namespace")]  # those warned of above
        if os.geteuid() == 0:
            expected.remove("user-namespace")  # a root worker leaves root for an identity of its own instead
        missing = [layer for layer in expected if layer not in layers]
        if missing:
            log.warning(
                "worker walls unavailable here: %s (the kernel, the container's policy or the service's rights refuse them)",
                ", ".join(missing),
            )
        log.info("worker sandbox in effect: %s%s", ", ".join(layers) or "none", f" (Landlock ABI {abi})" if abi else "")

    @property
    def network_isolation(self) -> str:
        """namespace, user-namespace or unavailable, as the last probe found."""
        return describe_isolation(self.isolation)[0]

    @property
    def worker_sandbox(self) -> list[str]:
        """What confines a worker, as the last probe found (LAYERS, in order)."""
        return describe_isolation(self.isolation)[1]

    @property
    def landlock_abi(self) -> int:
        """The Landlock ABI a worker is confined with, as the last probe found (0: none)."""
        return describe_isolation(self.isolation)[2]

    def job(self, task: Task, **details: object) -> WorkerJob:
        """A job with this service's limits."""
        settings = self.settings
        limits = WorkerJob(
            task,
            settings.worker_memory,
            settings.worker_cpu_seconds,
            settings.max_external_files,
            max_tensor_bytes=settings.max_tensor_bytes,
            worker_uid=settings.worker_uid,
            worker_gid=settings.worker_gid,
            max_static_output=settings.max_static_output,
            max_inlined_nodes=settings.max_inlined_nodes,
            max_loop_trips=settings.max_loop_trips,
            smoke_cpu_seconds=settings.smoke_cpu_seconds,
            smoke_second_dim=settings.smoke_second_dim,
        )
        return replace(limits, **details)  # type: ignore[arg-type]

    def _groups(self, job: WorkerJob) -> tuple[WorkerJob, JobGroups | None]:
        """The job's own cgroups (none where the service may not make them), and the job joining them."""
        if self.cgroups is None:
            return job, None
        try:
            groups = self.cgroups.make(job.memory)
        except OSError as error:
            log.warning("no cgroup for this worker (%s): its memory watch alone limits it", error)
            return job, None
        return replace(job, cgroups=groups.joined), groups

    def _fork(self, job: WorkerJob) -> tuple[multiprocessing.process.BaseProcess, Connection, WorkerOutput]:
        """A worker started on `job`: the process, the reading end of its
        connection, and the reader of its stdout and stderr. A job that binds
        external data gets a socket to open them through (`service.sandbox.worker.file_broker`),
        answered by a thread of its own until the worker closes it."""
        reader, writer = self.context.Pipe(duplex=False)
        output_reader, output_writer = self.context.Pipe(duplex=False)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) if job.task in READS_EXTERNAL_DATA else (None, None)
        process = self.context.Process(target=self.worker_entry, args=(writer, job, output_writer, theirs), daemon=True)
        try:
            process.start()
        finally:
            writer.close()
            output_writer.close()
            if theirs is not None:
                theirs.close()
        assert process.pid is not None
        if ours is not None:
            threading.Thread(target=serve_requests, args=(ours, job), name=f"file-broker-{process.pid}", daemon=True).start()
        return process, reader, WorkerOutput(output_reader, process.pid)

    def probe(self, timeout: float = 5.0) -> str:
        """Fork one worker that only sets its limits and answers; its isolation."""
        header = self.run_probe(self.job("probe"), timeout)
        return header.isolation

    def run_probe(self, job: WorkerJob, timeout: float) -> WorkerHeader:
        """Run a job that answers with one header (a probe)."""
        return WorkerHeader.model_validate_json(self.first_frame(job, timeout))

    def first_frame(self, job: WorkerJob, timeout: float) -> bytes:
        """Run a job whose worker answers with one frame (at most 64 KiB): that
        frame, the worker ended then."""
        job, groups = self._groups(job)
        process, reader, output = self._fork(job)
        try:
            if not reader.poll(timeout):
                raise RuntimeError("the probe worker did not answer")
            return reader.recv_bytes(1 << 16)
        finally:
            reader.close()
            _kill(process)
            process.join(timeout)
            output.finish()
            if groups is not None:
                WorkerCgroups.finish(groups)

    def run_checks(
        self, job: WorkerJob, control: WorkerControl | None = None, exit_beside: ExitBeside | None = None
    ) -> tuple[list[StageReport], WorkerOutcome]:
        """Run a check worker (task "checks"): the stage reports it sent, and
        how it ended (a worker that died midway has sent the stages it finished)."""
        reports: list[StageReport] = []

        def receive(reader: Connection) -> WorkerOutcome:
            while True:
                frame = reader.recv_bytes(MAX_HEADER_BYTES)
                if frame.startswith(b'{"stage"'):
                    if len(reports) == len(job.checks):
                        raise WorkerProtocolError("more stage reports than stages asked")
                    reports.append(StageReport.model_validate_json(frame))
                    continue
                header = WorkerHeader.model_validate_json(frame)
                if header.status == "error" and header.error is not None and not reports:  # before any stage: the model, or a binding
                    return WorkerOutcome("error", header=header, error=header.error)
                if header.status != "ok":
                    raise WorkerProtocolError(f"unexpected status {header.status!r}")
                return WorkerOutcome("ok", header=header)

        outcome = self.run(job, [], receive=receive, control=control, exit_beside=exit_beside)
        return reports, outcome

    def run(
        self,
        job: WorkerJob,
        destinations: list[Path],
        max_bytes: int | None = None,
        receive: Callable[[Connection], WorkerOutcome] | None = None,
        control: WorkerControl | None = None,
        exit_beside: ExitBeside | None = None,
    ) -> WorkerOutcome:
        """Run `job` in a fresh worker; the streams of an ok answer are written
        to `destinations`, one file each, in order, if they come to at most
        `max_bytes` in all (or `receive` reads the answer); `control` may end
        it; with `exit_beside`, a whole answer is returned before the worker has exited."""
        started = time.monotonic()
        job, groups = self._groups(replace(job, asked_at=started))
        process, reader, output = self._fork(job)
        assert process.pid is not None
        if control is not None:
            control.attach(lambda: _kill(process))
        memory_watch = WorkerMemoryWatch(process.pid, job.memory, lambda: _kill(process))
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
            outcome = receive(reader) if receive is not None else receive_answer(reader, destinations, max_bytes)
        except StreamsTooLarge as error:
            outcome = WorkerOutcome("too_large", detail=str(error))
        except OSError as error:
            if not is_full(error):
                broken = f"the worker's result was broken: {str(error)[:200]}"
            else:
                outcome = WorkerOutcome("store_full", detail="the store's file system is full")
        except EOFError:
            broken = "the worker ended without a complete result"
        except (ValueError, ValidationError, WorkerProtocolError) as error:
            broken = f"the worker's result was broken: {str(error)[:200]}"
        finally:
            reader.close()
            timer.cancel()
        whole = outcome is not None and not broken and outcome.status not in ("store_full", "too_large")
        if whole and outcome is not None and exit_beside is not None:
            outcome.seconds = time.monotonic() - started
            exit_beside.started = True
            reaping = threading.Thread(
                target=self._reap, args=(process, memory_watch, output, groups, started, exit_beside), name="worker-exit", daemon=True
            )
            reaping.start()
            return outcome
        if whole:
            process.join(max(0.1, self.settings.worker_timeout - (time.monotonic() - started)))
        elif (outcome is None or broken) and not deadline_hit.is_set():
            process.join(EXIT_GRACE_SECONDS)  # a worker that broke off is usually exiting: see how, rather than kill it
        killed_for_memory = self._ended(process, memory_watch, output, groups)
        seconds = time.monotonic() - started
        if outcome is None or broken:
            exitcode = process.exitcode
            if killed_for_memory or memory_watch.ran_out(-exitcode if exitcode is not None and exitcode < 0 else None):
                exitcode = EXIT_MEMORY
            outcome = self._classify_death(exitcode, deadline_hit.is_set(), seconds, broken, job.memory)
        outcome.seconds = seconds
        return outcome

    def _ended(
        self, process: multiprocessing.process.BaseProcess, memory_watch: WorkerMemoryWatch, output: WorkerOutput, groups: JobGroups | None
    ) -> bool:
        """End the worker (killed if it still runs), reap it, and close what watched it; whether its cgroup killed it for memory."""
        _kill(process)
        process.join()
        memory_watch.stop()
        output.finish()
        return groups is not None and WorkerCgroups.finish(groups)

    def _reap(
        self,
        process: multiprocessing.process.BaseProcess,
        memory_watch: WorkerMemoryWatch,
        output: WorkerOutput,
        groups: JobGroups | None,
        started: float,
        exit_beside: ExitBeside,
    ) -> None:
        """A worker whose whole answer was returned: its own exit waited for (within the deadline), then `_ended`."""
        try:
            process.join(max(0.1, self.settings.worker_timeout - (time.monotonic() - started)))
            self._ended(process, memory_watch, output, groups)
        finally:
            exit_beside._finished()

    def _classify_death(self, exitcode: int | None, deadline: bool, seconds: float, broken: str, memory: int) -> WorkerOutcome:
        cpu = self.settings.worker_cpu_seconds
        if deadline:
            return WorkerOutcome(
                "resource_limit", limit="time", detail=f"the import ran past the {self.settings.worker_timeout:g} s deadline"
            )
        if exitcode == -signal.SIGXCPU or (exitcode == -signal.SIGKILL and seconds >= cpu + 1):
            return WorkerOutcome("resource_limit", limit="cpu", detail=f"the import used more than {cpu} s of CPU time")
        if exitcode == EXIT_MEMORY:
            return WorkerOutcome("resource_limit", limit="memory", detail=f"the import needed more than {shown_size(memory)} of memory")
        if exitcode == -signal.SIGSYS:  # SCMP_ACT_KILL_PROCESS (service.sandbox.worker.seccomp)
            return WorkerOutcome("crashed", detail="the import worker was stopped by its sandbox: it made a forbidden system call (SIGSYS)")
        if exitcode is not None and exitcode < 0:
            how = (
                f"was killed by {signal.Signals(-exitcode).name}"
                if -exitcode in signal.Signals._value2member_map_
                else f"died by signal {-exitcode}"
            )
        else:
            how = f"exited with status {exitcode}"
        return WorkerOutcome("crashed", detail=f"the import worker {how}" + (f" ({broken})" if broken and exitcode == 0 else ""))


def describe_isolation(isolation: str) -> tuple[str, list[str], int]:
    """A worker's report ("user-namespace+pid-namespace+...+landlock-7+seccomp",
    "seccomp", "unavailable", ...) as /readyz shows it: the network isolation
    (namespace, user-namespace or unavailable), the walls in effect (LAYERS,
    in order) and the Landlock ABI (0: none)."""
    parts = isolation.split("+")
    abi = next((int(part.removeprefix(LANDLOCK_PREFIX)) for part in parts if part.startswith(LANDLOCK_PREFIX)), 0)
    present = set(parts) | ({"landlock"} if abi else set())
    layers = [layer for layer in LAYERS if layer in present]
    return network_isolation(layers), layers, abi


class WorkerOutput:
    """Reads what a worker writes to its stdout and stderr (a pipe), at most
    MAX_WORKER_OUTPUT bytes, and logs it line by line as the worker's, with
    control characters escaped: a worker cannot write into the service's log."""

    def __init__(self, reader: Connection, pid: int) -> None:
        self._reader = reader
        self._pid = pid
        self._thread = threading.Thread(target=self._read, name=f"worker-output-{pid}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        kept = bytearray()
        dropped = 0
        try:
            while chunk := os.read(self._reader.fileno(), 65536):
                room = MAX_WORKER_OUTPUT - len(kept)
                kept += chunk[:room]
                dropped += max(0, len(chunk) - room)
        except OSError:
            pass
        finally:
            self._reader.close()
        for line in kept.decode(errors="replace").splitlines()[:MAX_WORKER_LINES]:
            log.warning("worker %d: %s", self._pid, _printable(line[:MAX_LINE_CHARACTERS]))
        if dropped:
            log.warning("worker %d: %d more bytes of output not logged", self._pid, dropped)

    def finish(self) -> None:
        """Wait (briefly) for the worker's output to be read and logged."""
        self._thread.join(EXIT_GRACE_SECONDS)


def _printable(text: str) -> str:
    return "".join(character if character.isprintable() else f"\\x{ord(character):02x}" for character in text)


def _kill(process: multiprocessing.process.BaseProcess) -> None:
    if process.exitcode is None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            process.kill()


class StreamsTooLarge(Exception):
    """The worker announced more bytes than the job may write."""


def receive_answer(reader: Connection, destinations: list[Path], max_bytes: int | None) -> WorkerOutcome:
    """A worker's answer: its header, and the streams it announces written to
    `destinations` (at most `max_bytes` in all; else StreamsTooLarge)."""
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
    if max_bytes is not None and sum(header.streams) > max_bytes:
        raise StreamsTooLarge(f"the import would add {sum(header.streams)} bytes to the store, more than the {max_bytes} allowed")
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
