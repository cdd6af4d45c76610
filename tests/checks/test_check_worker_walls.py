"""The check worker's file policy: once the model and its external files are
mapped, the worker narrows Landlock to the code alone, so onnxruntime opens
no file of its own. Shown inside a real sandboxed worker (the test hook runs
code there with every wall up): after the narrowing, reading the external
data file is refused by the kernel, and so is onnxruntime's own attempt to
load the model from its path (it would open the model and its external
data); the runtime stage, given the importer's memory, still loads the model
and the smoke run computes.

The model and its external data are handed in a folder any user may reach
(a copy): the test code opens them by path once the walls are up, and where a
container's policy refuses namespaces a root worker has no minimal root and
reads the host's files as uid 65534, to which a checkout under /root is
closed. So what refuses the external file, there as here, is Landlock, and
the filter and the worker's lost privileges are shown in force beside it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.faults import FaultSandbox as Sandbox  # the test-only worker entry: jobs with test_code
from support.service_harness import SAMPLES, started_sandbox
from support.worker_walls import public_copy

NARROWED_WORKER = """
import os
import importer
from service.sandbox.worker import confinement
from service.checks.stages.runtime import runtime_stage
from service.checks.stages.smoke import smoke_stage

folder = {folder!r}
model = importer.load_model(os.path.join(folder, "model.onnx"))
seen = []
seen.append("narrowed" if confinement.narrow_to_code() else "not narrowed")
try:
    open(os.path.join(folder, "weights.bin"), "rb").close()
    seen.append("external file read")
except PermissionError:
    seen.append("external file refused")
import onnxruntime
try:
    onnxruntime.InferenceSession(os.path.join(folder, "model.onnx"), providers=["CPUExecutionProvider"])
    seen.append("onnxruntime opened the files")
except Exception as error:
    seen.append("onnxruntime refused: " + type(error).__name__)
loaded, session = runtime_stage(model)
seen.append("runtime " + loaded.status)
seen.append("smoke " + smoke_stage(session, model, {{}}).status)
result = "; ".join(seen)
"""


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with started_sandbox() as started:
        yield started


def test_onnxruntime_opens_no_file_in_a_narrowed_check_worker(sandbox: Sandbox) -> None:
    if not sandbox.landlock_abi:
        pytest.skip("Landlock is unavailable here: the file policy cannot be shown")
    with public_copy(*(SAMPLES / "external").iterdir()) as copy:
        folder = str(copy)
        code = NARROWED_WORKER.format(folder=folder)
        job = sandbox.job("checks", directory=folder, model="model.onnx", display_name="model.onnx", test_code=code)
        header = sandbox.run_probe(job, timeout=60.0)
    result = header.test_result or ""
    parts = result.split("; ")
    assert parts[:2] == ["narrowed", "external file refused"], result
    assert parts[2].startswith("onnxruntime refused"), result
    assert parts[3:] == ["runtime pass", "smoke pass"], result
    layers = header.isolation.split("+")
    assert "unprivileged" in layers and "seccomp" in layers, header.isolation
