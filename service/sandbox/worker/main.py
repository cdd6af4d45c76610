"""The worker's entry: one fresh process per job, forked from the fork server.

Owns `main(connection, job, output)`. It keeps only its own descriptors
(stdout and stderr into `output`, a pipe the front end reads), has its task
open its inputs (`service.tasks.dispatch.open_input`: opened, not read), then puts up its walls
(`service.sandbox.worker.confinement`, which says what each does and in which order: its own
cgroups, namespaces and minimal root, no privilege, Landlock, its memory
watchdog and limits, and last its seccomp allow-list), and only then reads
a byte of the model. It reports what is in effect as its header's
`isolation` ("user-namespace+pid-namespace+...+seccomp"; "unavailable" for
none; `service.sandbox.supervisor.describe_isolation` reads it back). Then it does its task
(`service.tasks.dispatch.run_task`). Once its answer is written it leaves
with `os._exit`, without tearing down its heap (a 200,000-node graph takes
longer to free than to send).
"""

from __future__ import annotations

import ctypes
import gc
import os
import socket
import threading
import time
from multiprocessing.connection import Connection

from importer.source import confined_descriptor
from service.sandbox.protocol import WorkerHeader, WorkerJob
from service.sandbox.worker import confinement, lifeline
from service.sandbox.worker.file_broker import FileBroker
from service.sandbox.worker.memory_limit import EXIT_MEMORY
from service.tasks import compare
from service.tasks.dispatch import open_input, run_task, send_header
from service.tasks.steps import Steps


def main(connection: Connection, job: WorkerJob, output: Connection | None = None, files: socket.socket | None = None) -> None:
    """Do `job` and send the outcome over `connection`; then leave at once.
    `output` (a pipe the front end reads) becomes the worker's stdout and
    stderr; `files` is the socket the front end opens external data files through."""
    steps = Steps(job.asked_at)
    steps.done("fork")
    lifeline.die_with_fork_server()  # a worker never outlives the fork server (and so its front end)
    code = 0
    try:
        kept = {connection.fileno()} | ({files.fileno()} if files is not None else set())
        confinement.keep_only_descriptors(kept, output.fileno() if output is not None else None)
        if job.sleep and not job.spin:  # test hook: hold the worker before it opens anything
            time.sleep(job.sleep)
        if job.task == "diff":  # two graph documents, opened as a model is, before the walls
            documents = compare.open_documents(job)
            run_task(connection, job, confinement.confine(job), documents=documents)
            return
        opened = open_input(connection, job)
        if opened is False:
            return
        steps.done("open")
        isolation = confinement.confine(job)  # in the parent of a PID namespace made here this does not return
        steps.done("walls")
        if job.task == "probe":
            send_header(connection, WorkerHeader(status="probe", isolation=isolation))
            return
        if job.test_code:  # test hook: run code with the model open and every wall up, in place of the task
            send_header(connection, WorkerHeader(status="probe", isolation=isolation, test_result=run_test_code(job.test_code)))
            return
        if job.test_action:  # test hook: try what the sandbox must stop
            try_forbidden(job)
        if job.sleep and job.spin:  # test hook: burn that much CPU time under the worker's limits (on a busy machine too)
            until = time.process_time() + job.sleep
            while time.process_time() < until:
                pass
        opener = FileBroker(files).open if files is not None else confined_descriptor
        run_task(connection, job, isolation, opened, opener, narrow=confinement.narrow_to_code, steps=steps)
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


def run_test_code(code: str) -> str:
    """Test hook: run `code`; what it left in `result` (as text), or the exception it raised."""
    namespace: dict[str, object] = {}
    try:
        exec(code, namespace)
    except BaseException as error:
        return f"raised {type(error).__name__}: {error}"
    return str(namespace.get("result"))


def try_forbidden(job: WorkerJob) -> None:
    """Test hook (`WorkerJob.test_action`, refused by the sandbox unless test
    hooks are on): try what the sandbox must stop. "socket": connect to
    127.0.0.1:1; "exec": run `directory/model` (default /bin/true); "ptrace":
    PTRACE_TRACEME; "fork": a child process; "thread": start and join a thread
    (allowed), then go on with the task. Where the sandbox does not stop the
    attempt, its error ends the worker (status 1) or the program runs."""
    action = job.test_action
    if action == "socket":
        with socket.socket() as connection:
            connection.connect(("127.0.0.1", 1))
    elif action == "exec":
        program = os.path.join(job.directory, job.model) if job.model else "/bin/true"
        os.execv(program, [program])
    elif action == "ptrace":
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.ptrace(0, 0, None, None) != 0:  # PTRACE_TRACEME
            raise OSError(ctypes.get_errno(), "ptrace")
    elif action == "fork":
        if os.fork() == 0:
            os._exit(0)
    elif action == "thread":
        thread = threading.Thread(target=lambda: None)
        thread.start()
        thread.join()
        return
    else:
        raise ValueError(f"unknown test action {action!r}")
    raise RuntimeError(f"test action {action!r} was not stopped")


confinement.make_undumpable()  # the fork server, and so every worker it forks
