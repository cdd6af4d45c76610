"""The runtime verdict from the real sandboxed check worker equals onnxruntime's
own load of the same file, made directly in this process: on the real models
(the backend's light/ ones, the samples) and a fixed sample of every eighth
backend model. (tests/checks/test_runtime.py compares every backend model
with the stage run in process: this shows the sandbox changes no verdict: no
wall, limit or narrowed file policy makes a loadable model fail.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.paths import BACKEND_DATA, REPO
from support.service_harness import SAMPLES, started_sandbox

from service.checks.check_worker import check_worker_results
from service.sandbox.supervisor import Sandbox

ort: Any = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (the `runtime` extra)")
GROUPS = ("node", "simple", "pytorch-converted", "pytorch-operator")
EVERY = 8


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with started_sandbox() as started:
        yield started


def sample(manifest: dict[str, Any], backend_dir: Path) -> list[Path]:
    chosen = [backend_dir / item for item in manifest["models"] if item.split("/")[0] in GROUPS][::EVERY]
    return chosen + sorted((BACKEND_DATA / "light").glob("*.onnx")) + sorted(SAMPLES.rglob("*.onnx"))


def loads(path: Path) -> bool:
    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception:
        return False
    return True


@pytest.mark.slow
def test_the_sandboxed_runtime_verdict_is_onnxruntimes_own(
    sandbox: Sandbox, backend_manifest: dict[str, Any], backend_dir: Path, report: list[str]
) -> None:
    ort.set_default_logger_severity(4)
    paths = sample(backend_manifest, backend_dir)
    assert len(paths) > 200
    started = time.monotonic()
    differences: dict[str, str] = {}
    for path in paths:
        job = sandbox.job("import", directory=str(path.parent), model=path.name, display_name=path.name, checks=("runtime",))
        (result,) = check_worker_results(sandbox, job)
        expected = "pass" if loads(path) else "fail"
        if result.status != expected:
            differences[str(path.relative_to(REPO))] = f"sandboxed {result.status} ({result.reason}), onnxruntime alone: {expected}"
    report.append(f"sandboxed runtime sweep: {len(paths)} models, {len(differences)} differences, {time.monotonic() - started:.1f} s")
    assert not differences, differences
