"""The check worker's bound files: onnxruntime opens the model's external data by name, and nothing else.

A check job that names its model's external files (`mapped_files`, as the
`externals` worker reads them) has the file broker open them before the
walls; the worker binds those descriptors' files, read-only, beside the
model file in its minimal root, and Landlock grants reading exactly those
files. Shown in real sandboxed workers (the test hook runs code there with
every wall up): the bound files read, onnxruntime makes its session from
the path; writing them, renaming them, linking to them, reading any other
path and listing the folder all fail; a file swapped on disk after the
broker checked it changes nothing the worker reads (swapped before the
bind, it is not bound: the weights are handed over); and the check worker's
runtime and smoke stages pass over the bound files, saying so (`weights`:
"mapped"), listing them with an `externals` worker of their own unless a
job's files were listed already. A model whose weights are inline has its
file alone bound, its weights mapped where they lie in it, behind the same
walls. Where the kernel gives no mount namespace the worker hands the
weights over and says that instead.

Why a process: walls: the binds, Landlock's rules and the seccomp filter
exist only in a real worker, and the swap races the front end's broker.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support.faults import FaultSandbox as Sandbox  # the test-only worker entry: jobs with test_code
from support.service_harness import SAMPLES, started_sandbox
from support.worker_walls import public_copy

from importer import ErrorKind, ModelImportError
from importer.source import confined_descriptor
from service.checks.check_worker import check_worker_results
from service.sandbox.worker import file_broker

TRIED = """
import os

def tried(attempt):
    try:
        attempt()
    except OSError as error:
        return type(error).__name__
    return "done"

def read(path):
    with open(path, "rb") as file:
        file.read(1)
"""  # what the attack code below runs each attempt with (the worker runs it as text)

ATTACKS = TRIED + """
import onnxruntime
from service.checks.stages.runtime import session_options
folder = {folder!r}
model, weights = os.path.join(folder, "model.onnx"), os.path.join(folder, "weights.bin")

def session():
    onnxruntime.InferenceSession(model, session_options(onnxruntime), providers=["CPUExecutionProvider"])

result = repr({{
    "read model": tried(lambda: read(model)),
    "read weights": tried(lambda: read(weights)),
    "session": tried(session),
    "write": tried(lambda: open(weights, "r+b").close()),
    "rename": tried(lambda: os.rename(weights, weights + ".moved")),
    "hard link": tried(lambda: os.link(weights, os.path.join(folder, "linked.bin"))),
    "other file": tried(lambda: read(os.path.join(folder, "other.bin"))),
    "outside": tried(lambda: read(os.path.join(os.path.dirname(folder), {outside!r}))),
    "list": tried(lambda: os.listdir(folder)),
}})
"""

INLINE_ATTACKS = TRIED + """
import importer
from service.checks.stages.runtime import runtime_stage
folder = {folder!r}
model = os.path.join(folder, "inline.onnx")

def session():
    with importer.load_model(model) as loaded:
        return runtime_stage(loaded, frozenset())[0].weights

result = repr({{
    "read model": tried(lambda: read(model)),
    "session": session(),
    "write": tried(lambda: open(model, "r+b").close()),
    "rename": tried(lambda: os.rename(model, model + ".moved")),
    "hard link": tried(lambda: os.link(model, os.path.join(folder, "linked.onnx"))),
    "other file": tried(lambda: read(os.path.join(folder, "other.bin"))),
    "list": tried(lambda: os.listdir(folder)),
}})
"""

SWAP_THEN_DIGEST = """
import hashlib, json, os, stat

def is_socket(fd):
    try:
        return stat.S_ISSOCK(os.fstat(fd).st_mode)
    except OSError:
        return False

broker = next(fd for fd in range(3, 256) if is_socket(fd))  # the file broker's socket, the worker's only one
os.write(broker, json.dumps([{folder!r}, "swap-now"]).encode())  # the test's broker swaps the file on disk, then refuses
os.read(broker, 65536)
with open({weights!r}, "rb") as file:
    result = hashlib.sha256(file.read()).hexdigest()
"""


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with started_sandbox() as started:
        yield started


@pytest.fixture
def inputs() -> Iterator[Path]:
    """The external-data sample in a folder any user may reach, beside a file the model does not name."""
    with public_copy(*(SAMPLES / "external").iterdir()) as folder:
        (folder / "other.bin").write_bytes(b"not the model's")
        (folder / "other.bin").chmod(0o644)
        yield folder


def _mapped_job(sandbox: Sandbox, folder: Path, **details: Any) -> Any:
    mapped = ("weights.bin", "more/bias.bin")
    return sandbox.job("checks", directory=str(folder), model="model.onnx", display_name="model.onnx", mapped_files=mapped, **details)


def _mapped(isolation: str) -> bool:
    return "files-mapped" in isolation.split("+")


def test_onnxruntime_opens_the_bound_files_and_nothing_else(sandbox: Sandbox, inputs: Path) -> None:
    if not sandbox.landlock_abi:
        pytest.skip("Landlock is unavailable here: the file policy cannot be shown")
    code = ATTACKS.format(folder=str(inputs), outside="outside.txt")
    header = sandbox.run_probe(_mapped_job(sandbox, inputs, test_code=code), timeout=60.0)
    if "mount-namespace" not in header.isolation.split("+"):
        assert not _mapped(header.isolation), header.isolation  # no mount namespace: nothing bound, the weights handed over
        return
    assert _mapped(header.isolation), header.isolation
    seen: dict[str, str] = eval(header.test_result or "")
    assert seen["read model"] == seen["read weights"] == seen["session"] == "done", seen
    for attack in ("write", "rename", "hard link", "other file", "outside", "list"):
        assert seen[attack] != "done", (attack, seen)
    assert seen["list"] == "PermissionError", seen  # the folder is there, but Landlock grants no listing
    assert seen["other file"] == "FileNotFoundError", seen  # not bound: not in the worker's root at all
    assert sorted(path.name for path in inputs.iterdir()) == ["model.onnx", "more", "other.bin", "weights.bin"]


@pytest.fixture
def inline() -> Iterator[Path]:
    """A model whose 256 KiB weight is inline (over ASIDE_BYTES), in a folder any user may reach, beside another file."""
    weight = helper.make_tensor("W", TensorProto.FLOAT, [256, 256], np.ones((256, 256), np.float32).tobytes(), raw=True)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"], name="mm")], "inline",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 256])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 256])], [weight],
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as made:
        path = Path(made) / "inline.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
        with public_copy(path) as folder:
            (folder / "other.bin").write_bytes(b"not the model's")
            (folder / "other.bin").chmod(0o644)
            yield folder


def test_an_inline_models_file_is_bound_alone_and_its_weights_mapped_in_place(sandbox: Sandbox, inline: Path) -> None:
    """A check job for the runtime stage binds the model file even when it names no external file: onnxruntime maps
    its inline weights where they lie in it (`weights`: "mapped"), and the walls hold against that file as against
    bound external files: no write, rename or link, no other file, no listing."""
    if not sandbox.landlock_abi:
        pytest.skip("Landlock is unavailable here: the file policy cannot be shown")
    code = INLINE_ATTACKS.format(folder=str(inline))
    names = {"model": "inline.onnx", "display_name": "inline.onnx"}
    job = sandbox.job("checks", directory=str(inline), **names, bind_for_runtime=True, test_code=code)
    header = sandbox.run_probe(job, timeout=60.0)
    if "mount-namespace" not in header.isolation.split("+"):
        assert not _mapped(header.isolation), header.isolation  # no mount namespace: nothing bound, the weights handed over
        return
    assert _mapped(header.isolation), header.isolation
    seen: dict[str, str] = eval(header.test_result or "")
    assert (seen["read model"], seen["session"]) == ("done", "mapped"), seen
    for attack in ("write", "rename", "hard link", "other file", "list"):
        assert seen[attack] != "done", (attack, seen)
    assert seen["other file"] == "FileNotFoundError", seen  # not bound: not in the worker's root at all
    assert sorted(path.name for path in inline.iterdir()) == ["inline.onnx", "other.bin"]


def test_the_runtime_and_smoke_stages_pass_over_an_inline_models_bound_file(sandbox: Sandbox, inline: Path) -> None:
    job = sandbox.job("checks", directory=str(inline), model="inline.onnx", display_name="inline.onnx", checks=("runtime", "smoke"))
    runtime, smoke = check_worker_results(sandbox, job)
    assert (runtime.status, smoke.status) == ("pass", "pass"), (runtime, smoke)
    assert runtime.weights == ("mapped" if "mount-namespace" in sandbox.probe().split("+") else ""), runtime


def test_a_file_swapped_after_its_check_changes_nothing_the_worker_reads(
    sandbox: Sandbox, inputs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights = inputs / "weights.bin"
    checked = hashlib.sha256(weights.read_bytes()).hexdigest()
    broker_open = confined_descriptor

    def swap_when_asked(directory: str, location: str) -> tuple[int, str]:
        """The broker's own, but for "swap-now": the weights replaced on disk by another file, once they are bound."""
        if location != "swap-now":
            return broker_open(directory, location)
        swapped = inputs / "swapped.bin"
        swapped.write_bytes(b"\x00" * weights.stat().st_size)
        swapped.chmod(0o644)
        os.replace(swapped, weights)
        raise ModelImportError(ErrorKind.EXTERNAL_DATA, "swapped", input_name=location)

    monkeypatch.setattr(file_broker, "confined_descriptor", swap_when_asked)  # the front end's broker, in this process
    code = SWAP_THEN_DIGEST.format(folder=str(inputs), weights=str(weights))
    header = sandbox.run_probe(_mapped_job(sandbox, inputs, test_code=code), timeout=60.0)
    if not _mapped(header.isolation):
        pytest.skip(f"no mount namespace here ({header.isolation}): the weights are handed over, nothing is read by name")
    assert hashlib.sha256(weights.read_bytes()).hexdigest() != checked  # the path names the new file on the host
    assert header.test_result == checked  # the worker reads the one checked


def test_the_runtime_and_smoke_stages_pass_over_the_bound_files(sandbox: Sandbox, inputs: Path) -> None:
    job = sandbox.job("checks", directory=str(inputs), model="model.onnx", display_name="model.onnx", checks=("runtime", "smoke"))
    runtime, smoke = check_worker_results(sandbox, job)
    assert (runtime.status, smoke.status) == ("pass", "pass"), (runtime, smoke)
    probe = sandbox.probe()
    assert runtime.weights == ("mapped" if "mount-namespace" in probe.split("+") else "handed over"), (runtime, probe)


def test_files_listed_already_are_bound_without_a_second_list(sandbox: Sandbox, inputs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job whose external files a worker listed already (to size its memory) runs no `externals` worker of its own."""
    tasks: list[str] = []
    run = sandbox.run

    def counted(job: Any, *args: Any, **details: Any) -> Any:
        tasks.append(job.task)
        return run(job, *args, **details)

    monkeypatch.setattr(sandbox, "run", counted)
    listed = ("weights.bin", "more/bias.bin")
    job = sandbox.job("checks", directory=str(inputs), model="model.onnx", display_name="model.onnx", checks=("runtime", "smoke"))
    runtime, smoke = check_worker_results(sandbox, job, listed=listed)
    assert (runtime.status, smoke.status) == ("pass", "pass"), (runtime, smoke)
    assert tasks == ["checks"], tasks
    assert runtime.weights == ("mapped" if "mount-namespace" in sandbox.probe().split("+") else "handed over"), runtime


def test_a_file_swapped_between_its_check_and_its_bind_is_not_bound(
    sandbox: Sandbox, inputs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker binds the inode the broker checked or nothing: one swapped on disk in between is not bound,
    and the weights are handed over from the descriptors checked."""
    weights = inputs / "weights.bin"

    def check_then_swap(directory: str, location: str) -> tuple[int, str]:
        opened = confined_descriptor(directory, location)
        if location == "weights.bin":
            swapped = inputs / "swapped.bin"
            swapped.write_bytes(weights.read_bytes())
            swapped.chmod(0o644)
            os.replace(swapped, weights)
        return opened

    monkeypatch.setattr(file_broker, "confined_descriptor", check_then_swap)  # the front end's broker, in this process
    job = sandbox.job("checks", directory=str(inputs), model="model.onnx", display_name="model.onnx", checks=("runtime", "smoke"))
    runtime, smoke = check_worker_results(sandbox, job)
    assert (runtime.status, runtime.weights, smoke.status) == ("pass", "handed over", "pass"), (runtime, smoke)
