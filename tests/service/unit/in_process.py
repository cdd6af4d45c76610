"""An in-process sandbox for the unit tests: the real worker task and the real
protocol, run in a thread of the test process. No fork, no walls, no limits,
and the test keeps its own identity: what it tests is the front end around
the worker (the import use case, the store, the routes), not the sandbox,
which the process tests cover."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

from service.sandbox.protocol import WorkerJob
from service.sandbox.supervisor import Sandbox, StreamsTooLarge, WorkerOutcome, receive_answer
from service.sandbox.worker.main import run_task


def _keep_files() -> bool:
    return False


class InProcessSandbox(Sandbox):
    jobs: list[WorkerJob]

    def start(self) -> None:
        self.isolation = "unavailable"
        self.jobs = []

    def probe(self, timeout: float = 5.0) -> str:
        return self.isolation

    def run(
        self,
        job: WorkerJob,
        destinations: list[Path],
        max_bytes: int | None = None,
        receive: Callable[[Connection], WorkerOutcome] | None = None,
    ) -> WorkerOutcome:
        self.jobs.append(job)
        started = time.monotonic()
        reader, writer = multiprocessing.Pipe(duplex=False)
        worker = threading.Thread(target=self._work, args=(writer, job), daemon=True)
        worker.start()
        try:
            outcome = receive(reader) if receive is not None else receive_answer(reader, destinations, max_bytes)
        except StreamsTooLarge as error:
            outcome = WorkerOutcome("too_large", detail=str(error))
        finally:
            reader.close()
            worker.join(30)
        outcome.seconds = time.monotonic() - started
        return outcome

    @staticmethod
    def _work(writer: Connection, job: WorkerJob) -> None:
        try:
            run_task(writer, job, "in-process", narrow=_keep_files, freeze=lambda: None)
        except OSError:
            pass  # the reader stopped (streams too large)
        finally:
            writer.close()
