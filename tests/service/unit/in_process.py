"""An in-process sandbox for the unit tests: the real worker task and the real
protocol, run in a thread of the test process. No fork, no walls, no limits,
and the test keeps its own identity: what it tests is the front end around
the worker (the import use case, the store, the routes), not the sandbox,
which the process tests cover. `import_parts` is the pipeline's parts over it:
a temporary store, the bundled samples as the data root; `served_app` the
whole application over it, for starlette's TestClient."""

from __future__ import annotations

import multiprocessing
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from service.app import create_app
from service.imports.admission import Admission
from service.imports.parts import ImportParts
from service.imports.report_links import ReportLinks
from service.sandbox.protocol import WorkerJob
from service.sandbox.supervisor import ExitBeside, Sandbox, StreamsTooLarge, WorkerControl, WorkerOutcome, receive_answer
from service.settings import Settings
from service.store.backends import open_data_root, open_store
from service.tasks.dispatch import run_task

SAMPLES = Path(__file__).resolve().parents[3] / "testdata" / "samples"


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
        control: WorkerControl | None = None,
        exit_beside: ExitBeside | None = None,  # a thread has no exit to reap: it answers once joined
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


def import_parts(tmp_path: Path, **settings: Any) -> ImportParts:
    """The import pipeline's parts: the in-process sandbox, a temporary store
    (`--store-backend memory`), a copy of the samples as the data root, one
    worker unless `settings` say otherwise."""
    data_root = tmp_path / "data"
    shutil.copytree(SAMPLES, data_root)
    defaults: dict[str, Any] = {"store_backend": "memory", "workers": 1, "store_min_free": 0}
    chosen = Settings(data_root=str(data_root), store=str(tmp_path / "store"), **(defaults | settings))
    store = open_store(chosen)
    store.open()
    sandbox = InProcessSandbox(chosen)
    sandbox.start()
    (tmp_path / "places").mkdir()
    admission = Admission(chosen.workers, 4, 4, tmp_path / "places", chosen.tenant_share)
    return ImportParts(chosen, store, sandbox, admission, open_data_root(chosen), ReportLinks.for_settings(chosen, store))


def served_app(tmp_path: Path, **settings: Any) -> Iterator[TestClient]:
    """The whole application with `settings` over the in-process sandbox (a temporary store, `--store-backend
    memory`, the bundled samples as the data root, one worker), started and stopped around the client it yields."""
    chosen = Settings(
        data_root=str(SAMPLES), store=str(tmp_path / "store"), store_backend="memory", workers=1, store_min_free=0, **settings
    )
    with TestClient(create_app(chosen, InProcessSandbox(chosen))) as client:
        yield client
