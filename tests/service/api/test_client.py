"""The Python client (`service.client`) and its command line against the real
service (in the test process, its workers real, on a loopback port: the
command line runs as a subprocess; the saturated server is a process): uploads with external data (as relative paths and as a
mapping), data-root imports, the summary, graph, paged tensors, tensors as
numpy arrays (against the onnx reference) and streamed bytes, delete,
refusals as `ServiceError`, API keys, 503 retried after `Retry-After` (a
saturated server, and a mock transport for the edge cases), and the async
twin. The command line: `import` prints the summary, `tensor` writes a .npy,
a refused import prints nothing on stdout, one problem line on stderr, and
exits 2; `import --external-data-dir` sends exactly the files the model
names. (Resumable uploads and progress: test_client_resumable.py.)
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from support.in_process_service import InProcessService, serving_in_process
from support.paths import REPO
from support.service_harness import SAMPLES, copy_samples, reference_sha256, saturated

from service.access.keys import new_key
from service.client import AsyncClient, Client, Retry, ServiceError
from service.client._common import tensor_path, upload_parts

ON_A_PORT = True  # the service on a loopback port, in the test process (support/servers.py): its command line runs as a subprocess

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)


EXTERNAL = SAMPLES / "external"
EXTERNAL_FILES = [EXTERNAL / "weights.bin", EXTERNAL / "more" / "bias.bin"]


@pytest.fixture()
def client(server: InProcessService) -> Iterator[Client]:
    with Client(server.url) as session:
        yield session


def onnx_arrays(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    model = onnx.load(str(path))
    return {t.name: numpy_helper.to_array(t, base_dir=str(path.parent)) for t in model.graph.initializer}


def broken_model(tmp_path: Path) -> Path:
    path = tmp_path / "broken.onnx"
    path.write_bytes((SAMPLES / "add.onnx").read_bytes()[:120])
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "service.client", *args], cwd=REPO, capture_output=True, text=True, timeout=120)


# -- imports and reading


def test_upload_with_external_data_files_under_their_relative_paths(client: Client) -> None:
    summary = client.import_file(EXTERNAL / "model.onnx", external_data=EXTERNAL_FILES)
    assert summary["input"] == "model.onnx"
    assert {t["name"] for t in summary["tensors"]} == {"W", "B"}
    expected = onnx_arrays(EXTERNAL / "model.onnx")
    for name, array in expected.items():
        got = client.tensor(summary["id"], name)
        assert got.dtype == array.dtype and got.shape == array.shape
        np.testing.assert_array_equal(got, array)
        streamed = b"".join(client.tensor_bytes(summary["id"], name, chunk_size=100))
        assert streamed == array.astype(array.dtype.newbyteorder("<")).tobytes()
    assert client.summary(summary["id"])["id"] == summary["id"]


def test_external_data_as_a_mapping_of_locations(client: Client, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.bin"
    elsewhere.write_bytes((EXTERNAL / "more" / "bias.bin").read_bytes())
    summary = client.import_file(
        EXTERNAL / "model.onnx", external_data={"weights.bin": EXTERNAL / "weights.bin", "more/bias.bin": elsewhere}
    )
    np.testing.assert_array_equal(client.tensor(summary["id"], "B"), onnx_arrays(EXTERNAL / "model.onnx")["B"])


def test_an_external_file_outside_the_models_folder_needs_a_location(tmp_path: Path) -> None:
    outside = tmp_path / "weights.bin"
    outside.write_bytes(b"")
    with pytest.raises(ValueError, match="not under the model's folder"):
        upload_parts(EXTERNAL / "model.onnx", [outside])
    assert upload_parts(EXTERNAL / "model.onnx", [EXTERNAL / "more" / "bias.bin"]) == [("more/bias.bin", EXTERNAL / "more" / "bias.bin")]


def test_path_import_graph_paged_tensors_and_delete(client: Client, data_root: Path) -> None:
    summary = client.import_path("typed_fields.onnx")
    model_id = summary["id"]
    listed = list(client.tensors(model_id))
    assert len(listed) == summary["counts"]["tensors"]
    assert [t["name"] for t in client.tensors(model_id, page_size=2)] == [t["name"] for t in listed]  # five pages
    assert [t["name"] for t in client.tensors(model_id, prefix="i")] == ["i32", "i16", "i64"]
    graph = client.graph(model_id)
    assert graph["format"] == "onnx-service-graph/4" and graph["graph"]["nodes"][0]["op_type"] == "Identity"
    assert any(item["id"] == model_id and item["verdict"] == summary["verdict"] for item in client.models())  # this tenant's verdict
    for entry in listed:
        if entry["elem_type"] == "STRING":
            with pytest.raises(ServiceError) as refused:
                client.tensor(model_id, entry["name"])
            assert refused.value.status == 415
            continue
        digest = reference_sha256(data_root / "typed_fields.onnx", entry["field_path"])
        assert hashlib.sha256(b"".join(client.tensor_bytes(model_id, entry["name"]))).hexdigest() == digest
    client.delete(model_id)
    with pytest.raises(ServiceError) as gone:
        client.summary(model_id)
    assert gone.value.status == 404 and gone.value.kind is None


def test_a_shared_name_is_picked_by_field_path(client: Client) -> None:
    model_id = client.import_path("if_subgraph.onnx")["id"]
    with pytest.raises(ServiceError) as ambiguous:
        client.tensor(model_id, "k")
    assert ambiguous.value.status == 409 and len(ambiguous.value.problem["candidates"]) == 2
    then = client.tensor(model_id, "k", field_path="ModelProto.graph.node[0].attribute[1].g.node[0].attribute[0].t")
    np.testing.assert_array_equal(then, np.full([3], 1.0, dtype=np.float32))


def test_names_are_one_percent_encoded_segment() -> None:
    assert tensor_path("abc", "a/b c%?#") == "/models/abc/tensors/a%2Fb%20c%25%3F%23"
    assert tensor_path("abc", "..") == "/models/abc/tensors/%2E%2E"
    assert tensor_path("abc", "") == "/models/abc/tensors/"


def test_a_refused_model_raises_one_error_with_the_problem(client: Client, tmp_path: Path) -> None:
    with pytest.raises(ServiceError) as refused:
        client.import_file(broken_model(tmp_path))
    error = refused.value
    assert error.status == 422 and error.kind == "Malformed"
    assert isinstance(error.offset, int) and error.field_path == "ModelProto"
    assert error.input == "broken.onnx" and error.detail == error.problem["detail"]
    assert f"at byte {error.offset}" in str(error)
    with pytest.raises(ServiceError) as not_found:
        client.import_path("no/such/model.onnx")
    assert not_found.value.status == 404


# -- API keys


def test_the_token_is_sent_as_a_bearer_key(tmp_path: Path) -> None:
    secret, table = new_key("team-a", ["import", "read"])
    (tmp_path / "keys.toml").write_text(table)
    with serving_in_process(tmp_path / "store", copy_samples(tmp_path / "root"), "--api-keys", str(tmp_path / "keys.toml")) as keyed:
        with Client(keyed.url) as anonymous, pytest.raises(ServiceError) as refused:
            anonymous.import_path("add.onnx")
        assert refused.value.status == 401
        with Client(keyed.url, token=secret) as client:
            model_id = client.import_path("add.onnx")["id"]
            np.testing.assert_array_equal(client.tensor(model_id, "W"), np.arange(6, dtype=np.float32).reshape(2, 3) / 4)
            with pytest.raises(ServiceError) as forbidden:
                client.delete(model_id)
            assert forbidden.value.status == 403
        result = run_cli("--url", keyed.url, "--token", secret, "import-path", "add.onnx")
        assert result.returncode == 0 and json.loads(result.stdout)["id"] == model_id


# -- 503 and Retry-After


def test_503_is_retried_after_retry_after_on_a_saturated_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with saturated(tmp_path) as busy:
        with Client(busy.url, retry=Retry(attempts=0)) as impatient, pytest.raises(ServiceError) as overloaded:
            impatient.import_path("if_subgraph.onnx")
        assert overloaded.value.status == 503 and overloaded.value.retry_after is not None and overloaded.value.retry_after >= 1

        waits: list[float] = []
        real_sleep = time.sleep

        def sleep(seconds: float) -> None:
            waits.append(seconds)
            real_sleep(seconds)

        monkeypatch.setattr(time, "sleep", sleep)
        with Client(busy.url, retry=Retry(attempts=20)) as patient:
            summary = patient.import_path("if_subgraph.onnx")
        monkeypatch.undo()
    assert summary["input"] == "if_subgraph.onnx"
    assert waits and all(wait >= 1 for wait in waits)  # each wait is the server's Retry-After (at least 1 s)


def answers(*responses: httpx.Response) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    seen: list[httpx.Request] = []
    queue = list(responses)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return httpx.MockTransport(handler), seen


def overloaded(retry_after: str | None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    problem = {"type": "https://onnx-import.example/problems/overloaded", "title": "Too many imports", "status": 503, "detail": "busy"}
    return httpx.Response(503, json=problem, headers=headers)


def test_retries_are_bounded_and_honour_retry_after(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    waits: list[float] = []
    monkeypatch.setattr(time, "sleep", waits.append)
    transport, seen = answers(overloaded("2"), overloaded(None), httpx.Response(200, json={"id": "x"}))
    with Client("http://service.test", retry=Retry(attempts=3, backoff=0.5), transport=transport) as client:
        assert client.summary("x") == {"id": "x"}
    assert waits == [2.0, 1.0] and len(seen) == 3  # Retry-After, then the doubling backoff (0.5 x 2)

    waits.clear()
    transport, seen = answers(overloaded("1"))
    with Client("http://service.test", retry=Retry(attempts=2), transport=transport) as client, pytest.raises(ServiceError) as gave_up:
        client.summary("x")
    assert len(seen) == 3 and waits == [1.0, 1.0] and gave_up.value.status == 503

    waits.clear()
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=3600), usegmt=True)
    transport, seen = answers(overloaded(later))
    with Client("http://service.test", retry=Retry(max_wait=60), transport=transport) as client, pytest.raises(ServiceError) as too_long:
        client.summary("x")
    assert len(seen) == 1 and not waits and too_long.value.retry_after is not None and too_long.value.retry_after > 3000

    # an upload is sent again whole on each attempt
    model = tmp_path / "m.onnx"
    model.write_bytes(b"model bytes")
    transport, seen = answers(overloaded("0"), httpx.Response(201, json={"id": "y"}))
    with Client("http://service.test", transport=transport) as client:
        assert client.import_file(model)["id"] == "y"
    assert len(seen) == 2 and all(b"model bytes" in request.read() for request in seen)

    # an answer that is not a problem (a proxy's page) still raises ServiceError
    transport, _ = answers(httpx.Response(502, text="<html>bad gateway</html>"))
    with Client("http://service.test", transport=transport) as client, pytest.raises(ServiceError) as proxy:
        client.summary("x")
    assert proxy.value.status == 502 and "bad gateway" in proxy.value.detail


# -- the async twin


def test_the_async_client(server: InProcessService, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.url) as client:
            summary = await client.import_file(
                EXTERNAL / "model.onnx", external_data=[EXTERNAL / "weights.bin", EXTERNAL / "more" / "bias.bin"]
            )
            model_id = summary["id"]
            names = [t["name"] async for t in client.tensors(model_id, page_size=1)]
            assert names == ["W", "B"]
            expected = onnx_arrays(EXTERNAL / "model.onnx")
            np.testing.assert_array_equal(await client.tensor(model_id, "W"), expected["W"])
            streamed = b"".join([chunk async for chunk in client.tensor_bytes(model_id, "B")])
            assert streamed == expected["B"].tobytes()
            assert (await client.graph(model_id))["graph"]["name"] == "external"
            assert (await client.summary(model_id))["id"] == model_id
            assert model_id in [item["id"] async for item in client.models()]
            with pytest.raises(ServiceError) as refused:
                await client.import_file(broken_model(tmp_path))
            assert refused.value.kind == "Malformed"
            other = await client.import_path("add.onnx")
            await client.delete(other["id"])
            with pytest.raises(ServiceError):
                await client.summary(other["id"])

    asyncio.run(scenario())


# -- the command line


def test_cli_import_prints_the_summary_and_tensor_writes_npy(server: InProcessService, tmp_path: Path) -> None:
    result = run_cli(
        "--url",
        server.url,
        "import",
        str(EXTERNAL / "model.onnx"),
        "--external-data",
        str(EXTERNAL / "weights.bin"),
        str(EXTERNAL / "more" / "bias.bin"),
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    summary = json.loads(result.stdout)
    assert {t["name"] for t in summary["tensors"]} == {"W", "B"}
    out = tmp_path / "W.npy"
    result = run_cli("--url", server.url, "tensor", summary["id"], "W", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    np.testing.assert_array_equal(np.load(out), onnx_arrays(EXTERNAL / "model.onnx")["W"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["W.npy"]  # no temporary left behind


def test_cli_refused_import_prints_the_problem_on_stderr_and_exits_2(server: InProcessService, tmp_path: Path) -> None:
    result = run_cli("--url", server.url, "import", str(broken_model(tmp_path)))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    problem = json.loads(lines[0])
    assert problem["kind"] == "Malformed" and problem["field_path"] == "ModelProto" and isinstance(problem["offset"], int)
    assert problem["input"] == "broken.onnx"

    # a missing tensor: the same contract, and no file written
    out = tmp_path / "missing.npy"
    result = run_cli("--url", server.url, "tensor", "0" * 64, "W", "-o", str(out))
    assert result.returncode == 2 and result.stdout == "" and json.loads(result.stderr)["status"] == 404
    assert not out.exists() and not list(tmp_path.glob(".missing.npy*"))


def test_cli_without_a_service_exits_1(tmp_path: Path) -> None:
    result = run_cli("--url", "http://127.0.0.1:9", "--retries", "0", "import", str(EXTERNAL / "model.onnx"))
    assert result.returncode == 1 and result.stdout == ""  # (retries spent: test_client_commands.py)
    assert json.loads(result.stderr)["error"] == "ConnectError"


def test_cli_external_data_dir_sends_exactly_the_files_the_model_names(server: InProcessService, tmp_path: Path) -> None:
    folder = tmp_path / "data"
    shutil.copytree(EXTERNAL, folder)
    (folder / "unrelated.bin").write_bytes(b"not named by the model")  # sent, it would be refused as unused (400)
    model = folder / "model.onnx"
    result = run_cli("--url", server.url, "import", str(model), "--external-data-dir", str(folder))
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert {t["name"] for t in summary["tensors"]} == {"W", "B"}
    with Client(server.url) as client:
        assert client.import_file(model, external_data=[folder / "weights.bin", folder / "more" / "bias.bin"])["id"] == summary["id"]

    (folder / "more" / "bias.bin").unlink()
    result = run_cli("--url", server.url, "import", str(model), "--external-data-dir", str(folder))
    assert result.returncode == 1 and result.stdout == ""
    error = json.loads(result.stderr)
    assert error["error"] == "MissingExternalData" and "'more/bias.bin'" in error["detail"]
