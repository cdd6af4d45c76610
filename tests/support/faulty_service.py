"""`python -m support.faulty_service [settings]`: the service, with test faults (test-only).

`python -m service` as it is (`service.__main__.main`), but its front ends
serve `create_app` below: the service's app with `support.faults.Faults`
(the X-Test-* headers read, its workers run the test-only entry point
`support.fault_worker`), every import given the `FaultPlan` in
`ONNX_TEST_FAULTS` unless its request says otherwise. Started by
`support.service_harness.ServiceProcess` when a test's environment asks for
faults (`FaultPlan(...).env()`), with tests/ on PYTHONPATH. Nothing is
imported here before `main` runs: it sets up the process first (the
numeric libraries' threads, prometheus-client's shared folder).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI

    from service.settings import Settings

FACTORY = "support.faulty_service:create_app"


def create_app(settings: Settings, *, shared_dir: Path | None = None) -> FastAPI:
    """The app factory of a front end (as `service.app.create_app` is called)."""
    from support.faults import FaultPlan, Faults

    return Faults(FaultPlan.from_environ(os.environ)).app(settings, shared_dir=shared_dir)


if __name__ == "__main__":
    from service.__main__ import main

    sys.exit(main(factory=FACTORY))
