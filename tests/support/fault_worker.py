"""A test-only worker entry point: faults in a real worker, then the service's own entry.

The service never names this module. `support.faults.FaultSandbox` makes its
`Sandbox` with it (`worker="support.fault_worker:main"`), so the fork server
imports it and each forked worker runs `main`, which runs the service's own
entry (`service.sandbox.worker.main.main`) with `JobFaults` at its steps.
Faults come from the test code only: a job the tests made as a `FaultyJob`
(this module's subclass of `WorkerJob`, pickled to the fork server as any
job is) carries them; a plain `WorkerJob` runs as in the service.

- `sleep`: the worker waits that long before it opens its inputs (it holds
  only its own descriptors then); with `spin`, it burns that much CPU time
  instead, once its walls and limits are up (on a busy machine too). Either
  way it first names itself SLEEPER_NAME (its /proc/PID/comm), so that a test
  kills or waits for this worker, never the readiness probe's beside it;
- `action`: once its walls are up, it tries what the sandbox must stop
  (`try_forbidden`: "socket", "exec", "ptrace", "fork"; "thread" is
  tried and the task goes on);
- `code`: Python run in place of the task, its model open and every wall
  up; what it leaves in `result` (or the exception it raised) comes back in
  the header's `test_result` (`ProbeAnswer`, read by `FaultSandbox.run_probe`);
- `linger`: a check job's worker answers at once, whole (no stage run), then
  waits that long before it exits: an exit that takes its time, as a worker's
  holding gigabytes does.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
import time
from dataclasses import dataclass, fields
from multiprocessing.connection import Connection

from service.sandbox.protocol import WorkerHeader, WorkerJob
from service.sandbox.worker import main as worker
from service.tasks.dispatch import send_header

ACTIONS = ("socket", "exec", "ptrace", "fork", "thread")
SLEEPER_NAME = "fault-sleeper"  # the name (comm) of a worker given `sleep`
PR_SET_NAME = 15


@dataclass(frozen=True, slots=True)
class FaultyJob(WorkerJob):
    sleep: float = 0.0  # the worker waits this long before it opens its inputs
    spin: bool = False  # ... burning CPU instead of sleeping, once its walls and limits are up
    action: str = ""  # one of ACTIONS, tried once the walls are up (try_forbidden)
    code: str = ""  # Python run in place of the task, its model open and every wall up
    linger: float = 0.0  # a check job: answered at once, then this long before the worker exits


def faulty(job: WorkerJob, **faults: object) -> FaultyJob:
    """`job` with `faults` (FaultyJob's own fields)."""
    return FaultyJob(**{field.name: getattr(job, field.name) for field in fields(job)}, **faults)  # type: ignore[arg-type]


class ProbeAnswer(WorkerHeader):
    """The header a worker running a job's `code` answers with."""

    test_result: str | None = None  # what the code left in `result`, or the exception it raised


class JobFaults:
    """The `WorkerSteps` that perform a `FaultyJob`'s faults (a plain job: none)."""

    def before_open(self, job: WorkerJob) -> None:
        if isinstance(job, FaultyJob) and job.sleep:
            ctypes.CDLL(None).prctl(PR_SET_NAME, SLEEPER_NAME.encode(), 0, 0, 0)
            if not job.spin:
                time.sleep(job.sleep)

    def walls_up(self, connection: Connection, job: WorkerJob, isolation: str) -> bool:
        if not isinstance(job, FaultyJob):
            return False
        if job.code:
            send_header(connection, ProbeAnswer(status="probe", isolation=isolation, test_result=run_code(job.code)))
            return True
        if job.linger:
            send_header(connection, WorkerHeader(status="ok", isolation=isolation))
            time.sleep(job.linger)
            return True
        if job.action:
            try_forbidden(job)
        if job.sleep and job.spin:
            until = time.process_time() + job.sleep
            while time.process_time() < until:
                pass
        return False


def main(connection: Connection, job: WorkerJob, output: Connection | None = None, files: socket.socket | None = None) -> None:
    """The forked worker's entry: the service's own, with `JobFaults` at its steps."""
    worker.main(connection, job, output, files, steps=JobFaults())


def run_code(code: str) -> str:
    """Run `code`; what it left in `result` (as text), or the exception it raised."""
    namespace: dict[str, object] = {}
    try:
        exec(code, namespace)
    except BaseException as error:
        return f"raised {type(error).__name__}: {error}"
    return str(namespace.get("result"))


def try_forbidden(job: FaultyJob) -> None:
    """Try what the sandbox must stop. "socket": connect to 127.0.0.1:1;
    "exec": run `directory/model` (default /bin/true); "ptrace":
    PTRACE_TRACEME; "fork": a child process; "thread": start and join a thread
    (allowed), then go on with the task. Where the sandbox does not stop the
    attempt, its error ends the worker (status 1) or the program runs."""
    action = job.action
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
        raise ValueError(f"unknown action {action!r}")
    raise RuntimeError(f"action {action!r} was not stopped")
