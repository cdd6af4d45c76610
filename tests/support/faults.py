"""Test-only faults in the service: injected at `create_app` and at the worker's start.

The service holds no test hook. What the tests need of it (a worker held or
burning CPU, a pause before the commit, a hold between a content's upload and
its record, a forbidden action or a probe's code in a walled worker) is put
in from here, through the service's generic seams:

- `Faults` is the app's `ImportSteps` (`create_app(steps=...)`): it pauses
  before the commit and holds after the upload; and it makes the app's
  sandbox, a `FaultSandbox`;
- `FaultSandbox` is a `Sandbox` made with the test-only worker entry point
  (`support.fault_worker:main`): it hands the import jobs of a request that
  asks for it a worker fault (a `FaultyJob`), and takes the faults of the
  tests that run workers themselves (`job(..., test_action=..., test_code=...,
  sleep=..., spin=...)`, `run_probe(...).test_result`);
- `FaultHeaders`, a test-only ASGI middleware `Faults.app` adds, reads the
  request's X-Test-* headers into this request's `FaultPlan` (a context
  variable): `X-Test-Worker-Sleep: 2.5` (the worker sleeps) or `spin:2.5` (it
  burns that much CPU time), `X-Test-Pause-Before-Commit: 2` (a wait between
  the worker's answer and the commit, to swap links under a running import)
  and `X-Test-Pause-After-Upload: 2` (a wait between the content's upload and
  its record, to kill a replica mid-commit). A request without them gets the
  app's own plan.

A service process with faults is `python -m support.faulty_service`, which
`support.service_harness` starts instead of `python -m service` when a test's
environment holds `FAULTS_VARIABLE` (`FaultPlan(...).env()`: the plan every
import gets unless its request says otherwise).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from service.app import create_app
from service.imports.parts import ImportSteps
from service.sandbox.protocol import WorkerJob
from service.sandbox.supervisor import ExitBeside, Sandbox, WorkerControl, WorkerOutcome
from service.settings import Settings
from support.fault_worker import FaultyJob, ProbeAnswer, faulty

FAULTS_VARIABLE = "ONNX_TEST_FAULTS"  # a FaultPlan as JSON: read by support.faulty_service, never by the service
WORKER_ENTRY = "support.fault_worker:main"
SLEEP_HEADER = "x-test-worker-sleep"
PAUSE_HEADER = "x-test-pause-before-commit"
HOLD_HEADER = "x-test-pause-after-upload"
# what a test may pass to FaultSandbox.job, and the FaultyJob field each sets
JOB_FAULTS = {"sleep": "sleep", "spin": "spin", "test_action": "action", "test_code": "code", "linger": "linger"}


@dataclass(frozen=True)
class FaultPlan:
    """The faults of an import."""

    worker_sleep: float = 0.0  # its worker waits this long before it opens its inputs
    spin: bool = False  # ... burning that much CPU time instead, once its walls are up
    pause_before_commit: float = 0.0
    hold_after_upload: float = 0.0  # between the content's upload and its record

    def env(self) -> dict[str, str]:
        """The environment that asks the test harness for a service with faults, this plan by default."""
        return {FAULTS_VARIABLE: json.dumps(asdict(self))}

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> FaultPlan:
        return cls(**json.loads(environ.get(FAULTS_VARIABLE) or "{}"))


FAULTS = FaultPlan().env()  # a service with faults, none unless a request asks
_REQUESTED: contextvars.ContextVar[FaultPlan | None] = contextvars.ContextVar("requested_faults", default=None)


class Faults(ImportSteps):
    """The app's faults: `plan` for every import, unless its request says otherwise (`FaultHeaders`)."""

    def __init__(self, plan: FaultPlan | None = None) -> None:
        self.plan = plan or FaultPlan()

    def now(self) -> FaultPlan:
        """The plan of the import running in this context."""
        return _REQUESTED.get() or self.plan

    async def before_commit(self, model_id: str) -> None:
        if pause := self.now().pause_before_commit:
            await asyncio.sleep(pause)

    async def content_uploaded(self, model_id: str) -> None:
        if hold := self.now().hold_after_upload:
            await asyncio.sleep(hold)  # the store's commit waits in its thread meanwhile

    def app(self, settings: Settings, sandbox: Sandbox | None = None, *, shared_dir: Path | None = None) -> FastAPI:
        """The service with these faults (`create_app`'s arguments)."""
        app = create_app(settings, sandbox or FaultSandbox(settings, self), self, shared_dir=shared_dir)
        app.add_middleware(FaultHeaders, faults=self)
        return app

    def requested(self, headers: Headers) -> FaultPlan:
        """This plan, with what the request's X-Test-* headers say instead (ValueError: one is not a number)."""
        plan = self.plan
        if (sleep := headers.get(SLEEP_HEADER)) is not None:
            spin = sleep.startswith("spin:")
            plan = replace(plan, worker_sleep=_seconds(sleep.removeprefix("spin:"), 600.0, SLEEP_HEADER), spin=spin)
        if (pause := headers.get(PAUSE_HEADER)) is not None:
            plan = replace(plan, pause_before_commit=_seconds(pause, 60.0, PAUSE_HEADER))
        if (hold := headers.get(HOLD_HEADER)) is not None:
            plan = replace(plan, hold_after_upload=_seconds(hold, 60.0, HOLD_HEADER))
        return plan


def _seconds(text: str, most: float, name: str) -> float:
    try:
        return max(0.0, min(most, float(text)))
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds (the worker's sleep: or spin: and one)") from None


class FaultHeaders:
    """Test-only ASGI middleware: the request's faults (`Faults.requested`) for everything it runs."""

    def __init__(self, app: ASGIApp, faults: Faults) -> None:
        self.app = app
        self.faults = faults

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            plan = self.faults.requested(Headers(scope=scope))
        except ValueError as error:
            await PlainTextResponse(str(error), 400)(scope, receive, send)
            return
        token = _REQUESTED.set(plan)
        try:
            await self.app(scope, receive, send)
        finally:
            _REQUESTED.reset(token)


class FaultSandbox(Sandbox):
    """A `Sandbox` whose workers run the test-only entry point (`support.fault_worker`):
    a `FaultyJob` gets its faults, a plain job runs as in the service. With
    `faults`, an import job gets the worker faults of its request's plan."""

    def __init__(self, settings: Settings, faults: Faults | None = None) -> None:
        super().__init__(settings, worker=WORKER_ENTRY)
        self.faults = faults

    def job(self, task: Any, **details: Any) -> WorkerJob:
        """`Sandbox.job`, taking also the faults of JOB_FAULTS (`test_action`, `test_code`, `sleep`, `spin`)."""
        faults = {JOB_FAULTS[name]: details.pop(name) for name in list(details) if name in JOB_FAULTS}
        job = super().job(task, **details)
        return faulty(job, **faults) if any(faults.values()) else job

    def run(
        self,
        job: WorkerJob,
        destinations: list[Path],
        max_bytes: int | None = None,
        receive: Callable[[Connection], WorkerOutcome] | None = None,
        control: WorkerControl | None = None,
        exit_beside: ExitBeside | None = None,
    ) -> WorkerOutcome:
        if self.faults is not None and job.task == "import" and not isinstance(job, FaultyJob):
            plan = self.faults.now()
            if plan.worker_sleep:
                job = faulty(job, sleep=plan.worker_sleep, spin=plan.spin)
        return super().run(job, destinations, max_bytes, receive, control, exit_beside)

    def run_probe(self, job: WorkerJob, timeout: float) -> ProbeAnswer:
        """A probe's header, or the answer of a job's `test_code` (its `test_result`)."""
        return ProbeAnswer.model_validate_json(self.first_frame(job, timeout))


SHIPPED = ("__init__.py", "fault_worker.py", "faults.py", "faulty_service.py")  # what a container needs of support/


def copy_for_container(target: Path) -> Path:
    """The test-only entry points (support/fault_worker.py, support/faulty_service.py
    and what they import) copied to `target`/support, readable by any user: a test
    mounts `target` into a container of the packaged image, which holds no test code,
    and puts it on sys.path (PYTHONPATH) where it wants faults."""
    here = Path(__file__).resolve().parent
    (target / "support").mkdir(parents=True, exist_ok=True)
    for name in SHIPPED:
        (target / "support" / name).write_bytes((here / name).read_bytes())
        (target / "support" / name).chmod(0o644)
    for folder in (target, target / "support"):
        folder.chmod(0o755)
    return target
