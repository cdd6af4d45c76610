"""The worker's entry: one fresh process per job, forked from the fork server.

Owns `main(connection, job, output, files, steps)`. It keeps only its own descriptors
(stdout and stderr into `output`, a pipe the front end reads), has its task
open its inputs (`service.tasks.dispatch.open_input`: opened, not read), then puts up its walls
(`service.sandbox.worker.confinement`, which says what each does and in which order: its own
cgroups, namespaces and minimal root, no privilege, Landlock, its memory
watchdog and limits, and last its seccomp allow-list), and only then reads
a byte of the model (a check worker given its model's external files has
the file broker open them first, to bind them for onnxruntime:
`service.sandbox.worker.bound_files`). It reports what is in effect as its header's
`isolation` ("user-namespace+pid-namespace+...+seccomp"; "unavailable" for
none; `service.sandbox.supervisor.describe_isolation` reads it back). Then it does its task
(`service.tasks.dispatch.run_task`). Once its answer is written it leaves
with `os._exit`, without tearing down its heap (a 200,000-node graph takes
longer to free than to send). `WorkerSteps` is what another entry point,
named by the code that makes the `Sandbox`, may add before the worker opens
its inputs and once its walls are up; this entry adds nothing.
"""

from __future__ import annotations

import gc
import os
import socket
from multiprocessing.connection import Connection
from typing import Protocol

from importer.source import confined_descriptor
from service.sandbox.protocol import WorkerHeader, WorkerJob
from service.sandbox.worker import confinement, lifeline
from service.sandbox.worker.bound_files import FILES_MAPPED, open_bound_files
from service.sandbox.worker.file_broker import FileBroker
from service.sandbox.worker.memory_limit import EXIT_MEMORY
from service.tasks import compare
from service.tasks.dispatch import open_input, run_task, send_header
from service.tasks.steps import Steps


class WorkerSteps(Protocol):
    """What another entry point adds at the worker's steps (`main`'s `steps`;
    the service's own entry adds nothing). Given by the code that names the
    entry point (`Sandbox(worker=...)`), never chosen by a job's data."""

    def before_open(self, job: WorkerJob) -> None:
        """The worker holds only its own descriptors; it has opened nothing yet."""

    def walls_up(self, connection: Connection, job: WorkerJob, isolation: str) -> bool:
        """Its inputs are open and every wall is up, before its task. True:
        it answered the job over `connection` itself, and the task is not run."""
        return False


def main(
    connection: Connection,
    job: WorkerJob,
    output: Connection | None = None,
    files: socket.socket | None = None,
    steps: WorkerSteps | None = None,
) -> None:
    """Do `job` and send the outcome over `connection`; then leave at once.
    `output` (a pipe the front end reads) becomes the worker's stdout and
    stderr; `files` is the socket the front end opens external data files through."""
    profile = Steps(job.asked_at)
    profile.done("fork")
    lifeline.die_with_fork_server()  # a worker never outlives the fork server (and so its front end)
    code = 0
    try:
        kept = {connection.fileno()} | ({files.fileno()} if files is not None else set())
        confinement.keep_only_descriptors(kept, output.fileno() if output is not None else None)
        if steps is not None:
            steps.before_open(job)
        if job.task == "diff":  # two graph documents, opened as a model is, before the walls
            documents = compare.open_documents(job)
            run_task(connection, job, confinement.confine(job), documents=documents)
            return
        opened = open_input(connection, job)
        if opened is False:
            return
        broker = FileBroker(files).open if files is not None else confined_descriptor
        bound = open_bound_files(job, opened, broker) if opened is not None else None  # a check worker's files, bound for onnxruntime
        profile.done("open")
        isolation = confinement.confine(job, bound)  # in the parent of a PID namespace made here this does not return
        profile.done("walls")
        if job.task == "probe":
            send_header(connection, WorkerHeader(status="probe", isolation=isolation))
            return
        if steps is not None and steps.walls_up(connection, job, isolation):
            return
        if bound is None:
            run_task(connection, job, isolation, opened, broker, narrow=confinement.narrow_to_code, steps=profile)
            return
        mapped = FILES_MAPPED in isolation.split("+")
        paths = tuple(bound.targets) if mapped else ()
        run_task(
            connection, job, isolation, opened, bound.opener(broker), narrow=lambda: confinement.narrow_to_code(paths),
            steps=profile, mapped=bound.locations if mapped else None,
        )  # fmt: skip
    except MemoryError:
        gc.collect()
        try:
            send_header(connection, WorkerHeader(status="resource_limit", limit="memory"))
        except BaseException:
            code = EXIT_MEMORY
    except BaseException:
        code = 1
        raise
    finally:
        connection.close()
        if code != 1:
            os._exit(code)


confinement.make_undumpable()  # the fork server, and so every worker it forks
