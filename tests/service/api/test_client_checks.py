"""The check stages through the client (issue 35): `checks=` and `dim=` on
every import (a multipart upload, a resumable one, a data-root path) and
`recheck` (`POST /models/{id}/checks`), in the synchronous and asynchronous
clients and the command line (`--checks`, `--dim`, `recheck ID`, exiting 0,
1 or 2 by the verdict as `onnx-import check` does).

In memory (an httpx mock transport): the query each method sends, and the
command line's exit statuses. Against a real service (in the test process, its workers real): the stages asked are the
stages run, on every kind of import; `recheck` runs the stages asked again
and answers the summary with them (each with a fresh `ran_at` and the
`versions` of onnx and onnxruntime, beside the stages run before), refuses an unknown model (404) and an unknown stage
(400), and the command line exits 1 on a model that fails.
"""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import onnx
import pytest
from onnx import TensorProto, helper
from support.in_process_service import InProcessService
from support.paths import REPO

import service.client.__main__ as command
from service.client import AsyncClient, Client, ServiceError

ON_A_PORT = True  # the service on a loopback port, in the test process (support/servers.py): its command line runs as a subprocess

Query = tuple[str, str, list[tuple[str, str]]]  # a request's method, path and query
ASKED = [("checks", "shape,runtime"), ("dim", "N:1"), ("dim", "a:b:2")]  # a name may hold colons: the value is after the last


def relu(folder: Path, output_type: int = TensorProto.FLOAT) -> Path:
    """A Relu over [N, 4], of a graph name of its own (a model never imported before); its
    output declared `output_type` (INT64: a model the shape stage fails)."""
    name = f"relu_{uuid.uuid4().hex}"
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", output_type, ["N", 4])],
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


class Recorder:
    """An in-memory service: every request kept (its body read); `POST /uploads`
    creates, a PATCH holds its body, the rest answers `answer`."""

    def __init__(self, answer: dict[str, Any] | None = None, status: int = 201) -> None:
        self.requests: list[httpx.Request] = []
        self.answer = answer if answer is not None else {"id": "m", "verdict": "pass"}
        self.status = status

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        request.read()
        if request.url.path == "/uploads":
            return httpx.Response(201, headers={"Location": "/uploads/" + "b" * 32})
        if request.method == "PATCH":
            return httpx.Response(204, headers={"Upload-Offset": request.headers["Content-Length"]})
        return httpx.Response(self.status, json=self.answer)

    def queries(self) -> list[Query]:
        return [(request.method, request.url.path, list(request.url.params.multi_items())) for request in self.requests]


# -- in memory


def test_every_import_and_recheck_send_the_checks_and_dims_asked(tmp_path: Path) -> None:
    model = relu(tmp_path)
    recorder = Recorder()
    dims = {"N": 1, "a:b": 2}
    with Client("http://service.test", transport=httpx.MockTransport(recorder), resume_store=tmp_path / "resume") as client:
        client.import_file(model, resumable=False, checks=["shape", "runtime"], dim=dims)
        client.import_file(model, resumable=True, checks="shape, runtime", dim=dims)
        client.import_path("m.onnx", checks=["shape,runtime"], dim=dims)
        client.recheck("m", checks=("shape", "runtime"), dim=dims)
        client.import_path("m.onnx")  # no checks named: the service's default, no parameter at all

    async def twin() -> None:
        async with AsyncClient("http://service.test", transport=httpx.MockTransport(recorder), resume_store=tmp_path / "resume") as client:
            await client.import_file(model, resumable=True, checks="shape,runtime", dim=dims)
            await client.import_path("m.onnx", checks="shape,runtime", dim=dims)
            await client.recheck("m", checks="shape,runtime", dim=dims)

    asyncio.run(twin())
    upload: Query = ("POST", "/uploads", [])
    patch: Query = ("PATCH", "/uploads/" + "b" * 32, [])
    imported: Query = ("POST", "/models", ASKED)
    rechecked: Query = ("POST", "/models/m/checks", ASKED)
    sync = [imported, upload, patch, imported, imported, rechecked, ("POST", "/models", [])]
    assert recorder.queries() == [*sync, upload, patch, imported, imported, rechecked]
    assert all(not request.content for request in recorder.requests if request.url.path.endswith("/checks"))  # no body


def test_a_dimension_is_a_whole_number(tmp_path: Path) -> None:
    recorder = Recorder()
    with Client("http://service.test", transport=httpx.MockTransport(recorder)) as client, pytest.raises(TypeError):
        client.recheck("m", dim={"N": 1.5})  # type: ignore[dict-item]
    assert recorder.requests == []


@pytest.mark.parametrize(("verdict", "status"), [("pass", 0), ("fail", 1), ("incomplete", 2)])
def test_the_command_line_recheck_exits_by_the_verdict(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], verdict: str, status: int
) -> None:
    summary = {"id": "m", "checks": {"shape": {"status": verdict}}, "verdict": verdict}
    recorder = Recorder(summary, status=200)
    monkeypatch.setattr(command, "Client", functools.partial(Client, transport=httpx.MockTransport(recorder)))
    argv = ["--url", "http://service.test", "recheck", "m", "--checks", "shape", "--checks", "runtime", "--dim", "N:1", "--dim", "a:b:2"]
    assert command.main(argv) == status
    printed = capsys.readouterr()
    assert json.loads(printed.out) == summary and printed.err == ""
    assert recorder.queries() == [("POST", "/models/m/checks", ASKED)]


def test_the_command_line_passes_checks_to_imports_and_refuses_a_bad_dim(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    recorder = Recorder()
    monkeypatch.setattr(command, "Client", functools.partial(Client, transport=httpx.MockTransport(recorder)))
    assert command.main(["--url", "http://service.test", "import-path", "m.onnx", "--checks", "shape,runtime", "--dim", "N:1"]) == 0
    assert recorder.queries() == [("POST", "/models", [("checks", "shape,runtime"), ("dim", "N:1")])]
    with pytest.raises(SystemExit) as usage:
        command.main(["--url", "http://service.test", "recheck", "m", "--dim", "N=1"])
    assert usage.value.code == 2 and "NAME:VALUE" in capsys.readouterr().err
    recorder.status, recorder.answer = 404, {"status": 404, "title": "Not Found", "detail": "no model m"}
    assert command.main(["--url", "http://service.test", "recheck", "m"]) == command.EXIT_REFUSED
    printed = capsys.readouterr()
    assert printed.out == "" and json.loads(printed.err)["status"] == 404


# -- against the service


def stages(summary: dict[str, Any]) -> dict[str, str]:
    return {name: entry["status"] for name, entry in summary["checks"].items()}


def test_every_kind_of_import_runs_the_stages_asked(server: InProcessService, data_root: Path, tmp_path: Path) -> None:
    with Client(server.url, resume_store=tmp_path / "resume") as client:
        one_shot = client.import_file(relu(tmp_path / "a"), resumable=False, checks="schema,shape")
        resumed = client.import_file(relu(tmp_path / "b"), resumable=True, checks=["smoke"], dim={"N": 3})
        by_path = client.import_path(relu(data_root).name, checks=["security"])
    assert stages(one_shot) == {"schema": "pass", "shape": "pass"}
    assert stages(resumed) == {"runtime": "pass", "smoke": "pass"}  # smoke brings runtime
    assert stages(by_path) == {"security": "pass"}

    async def twin() -> dict[str, Any]:
        async with AsyncClient(server.url, resume_store=tmp_path / "resume") as client:
            return await client.import_file(relu(tmp_path / "c"), checks="shape,smoke", dim={"N": 2})

    assert stages(asyncio.run(twin())) == {"shape": "pass", "runtime": "pass", "smoke": "pass"}
    with Client(server.url) as client, pytest.raises(ServiceError) as refused:
        client.import_file(relu(tmp_path / "d"), checks="schema,telepathy")
    assert refused.value.status == 400 and "telepathy" in refused.value.detail


def ran(summary: dict[str, Any], names: str, since: datetime) -> dict[str, str]:
    """The status of each stage of `names` (comma-separated) in `summary`'s checks,
    each of which must have run at `since` or later (the summary keeps the
    tenant's earlier runs of other stages beside them)."""
    entries = {name: summary["checks"][name] for name in names.split(",")}
    for entry in entries.values():
        ran_at = datetime.fromisoformat(entry["ran_at"].replace("Z", "+00:00"))
        assert ran_at.utcoffset() == timedelta(0) and ran_at >= since.replace(microsecond=0), (ran_at, since)
    return {name: entry["status"] for name, entry in entries.items()}


def run_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "service.client", "--url", url, *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_recheck_runs_the_stages_asked_again(server: InProcessService, tmp_path: Path) -> None:
    """Needs the service's `POST /models/{id}/checks` (issue 35): a 404 or 405 until it exists."""
    with Client(server.url) as client:
        model_id = client.import_file(relu(tmp_path), checks="schema")["id"]
        since = datetime.now(UTC)
        summary = client.recheck(model_id, checks="shape,runtime", dim={"N": 1})
        again = client.summary(model_id)
    assert summary["id"] == model_id and ran(summary, "shape,runtime", since) == {"shape": "pass", "runtime": "pass"}
    assert summary["verdict"] == "pass"
    assert again["checks"] == summary["checks"] and again["verdict"] == "pass"
    assert isinstance(summary["checks"]["shape"]["versions"]["onnx"], str)
    assert isinstance(summary["checks"]["runtime"]["versions"]["onnxruntime"], str)

    async def twin() -> dict[str, Any]:
        async with AsyncClient(server.url) as client:
            return await client.recheck(model_id, checks=["smoke"], dim={"N": 2})

    since = datetime.now(UTC)
    assert ran(asyncio.run(twin()), "runtime,smoke", since) == {"runtime": "pass", "smoke": "pass"}
    since = datetime.now(UTC)
    printed = run_cli(server.url, "recheck", model_id, "--checks", "shape,runtime", "--dim", "N:1")
    assert printed.returncode == 0, printed.stderr
    assert ran(json.loads(printed.stdout), "shape,runtime", since) == {"shape": "pass", "runtime": "pass"}


def test_recheck_refusals_and_a_failing_model(server: InProcessService, tmp_path: Path) -> None:
    """Needs the service's `POST /models/{id}/checks` (issue 35), as the test above."""
    with Client(server.url) as client:
        model_id = client.import_file(relu(tmp_path / "a"), checks="schema")["id"]
        failing = client.import_file(relu(tmp_path / "b", TensorProto.INT64), checks="schema")["id"]
        with pytest.raises(ServiceError) as unknown_model:
            client.recheck("0" * 64, checks="shape")
        with pytest.raises(ServiceError) as unknown_stage:
            client.recheck(model_id, checks="shape,telepathy")
    assert unknown_model.value.status == 404
    assert unknown_stage.value.status == 400 and "telepathy" in unknown_stage.value.detail
    since = datetime.now(UTC)
    printed = run_cli(server.url, "recheck", failing, "--checks", "shape")
    assert printed.returncode == 1, printed.stderr
    summary = json.loads(printed.stdout)
    assert ran(summary, "shape", since) == {"shape": "fail"} and summary["verdict"] == "fail"
    printed = run_cli(server.url, "recheck", "0" * 64, "--checks", "shape")
    assert printed.returncode == 2 and printed.stdout == "" and json.loads(printed.stderr)["status"] == 404
