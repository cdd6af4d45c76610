"""The service's limits as an API, in the test process over ASGI
(support.asgi_service, its workers real): upload size caps (413, nothing
kept; a chunked body cut off by its running count), a worker past its memory
cap (ResourceLimit; the service keeps serving), a data-root file changed
(409) or removed (410) after its import, and the store's cap evicting the
least recently used. Restarts and several processes on one store:
process/test_service_restarts.py."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from support.asgi_service import AsgiService
from support.big_models import write_big_graph_model
from support.service_harness import SAMPLES, assert_problem

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory, store_kind: str) -> Iterator[AsgiService]:
    base = tmp_path_factory.mktemp("service-limits")
    root = base / "root"
    shutil.copytree(SAMPLES, root)
    write_big_graph_model(root / "big_graph.onnx")
    service = AsgiService(
        base / "store", root, "--max-upload", "64KiB", "--max-upload-total", "96KiB", "--worker-memory", "128MiB", "--workers", "2"
    ).start()
    try:
        yield service
    finally:
        service.stop()


def _upload(client: httpx.Client, model: bytes, externals: dict[str, bytes]) -> httpx.Response:
    files = [("model", ("model.onnx", model))] + [("external_data", (k, v)) for k, v in externals.items()]
    return client.post("/models", files=files)


def test_model_part_over_the_limit_is_413_and_nothing_is_kept(limited: AsgiService) -> None:
    with limited.client() as client:
        body = assert_problem(_upload(client, b"\0" * (70 << 10), {}), 413, "payload-too-large")
        assert body["limit"] == "max_upload"
        assert limited.temporary_files() == []
        assert limited.stored_contents() == set()


def test_upload_total_over_the_limit_is_413(limited: AsgiService) -> None:
    model = (SAMPLES / "add.onnx").read_bytes()
    with limited.client() as client:
        body = assert_problem(_upload(client, model, {"a.bin": b"1" * (60 << 10), "b.bin": b"2" * (60 << 10)}), 413)
        assert body["limit"] == "max_upload_total"
        assert limited.temporary_files() == []
        # a declared Content-Length past the total is refused before reading
        big = b"--b\r\n" + b"x" * (200 << 10)
        response = client.post("/models", content=big, headers={"content-type": "multipart/form-data; boundary=b"})
        assert_problem(response, 413)
    with limited.client() as client:  # and the service is fine
        assert client.post("/models", json={"path": "add.onnx"}).status_code in (200, 201)
    assert limited.temporary_files() == []


def test_a_model_needing_more_memory_than_the_cap_is_a_resource_limit(limited: AsgiService) -> None:
    with limited.client() as client:
        body = assert_problem(client.post("/models", json={"path": "big_graph.onnx"}), 422, "resource-limit")
        assert body["kind"] == "ResourceLimit" and body["limit"] == "memory"
        assert body["input"] == "big_graph.onnx"
        for path in ("add.onnx", "typed_fields.onnx", "external/model.onnx"):  # still serving
            response = client.post("/models", json={"path": path})
            assert response.status_code in (200, 201), response.text
        assert client.get("/readyz").status_code == 200
    assert limited.temporary_files() == []


def test_changed_source_file_is_409_and_a_removed_one_410(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(SAMPLES, root)
    service = AsgiService(tmp_path / "store", root).start()
    try:
        with service.client() as client:
            model_id = client.post("/models", json={"path": "external/model.onnx"}).json()["id"]
            assert client.get(f"/models/{model_id}/tensors/B").status_code == 200
            (root / "external" / "more" / "bias.bin").write_bytes(b"\1" * 128)
            assert_problem(client.get(f"/models/{model_id}/tensors/B"), 409, "tensor-source-changed")
            (root / "external" / "weights.bin").unlink()
            assert_problem(client.get(f"/models/{model_id}/tensors/W"), 410, "tensor-source-gone")
    finally:
        service.stop()


def test_store_cap_evicts_the_least_recently_used(tmp_path: Path) -> None:
    import onnx
    from onnx import numpy_helper

    service = AsgiService(tmp_path / "store", SAMPLES, "--store-max-bytes", "1MiB").start()
    try:
        ids = []
        with service.client() as client:
            for seed in range(4):  # about 300 KB stored each
                model = onnx.load(str(SAMPLES / "add.onnx"))
                model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.full((300, 256), seed, np.float32), name="W"))
                response = client.post("/models", files={"model": ("m.onnx", model.SerializeToString())})
                assert response.status_code == 201, response.text
                ids.append(response.json()["id"])
                if seed == 2:
                    assert client.get(f"/models/{ids[0]}").status_code == 200  # the first is used again
            assert client.get(f"/models/{ids[0]}").status_code == 200
            assert_problem(client.get(f"/models/{ids[1]}"), 404)  # the least recently used went
            assert client.get(f"/models/{ids[3]}/tensors/W").status_code == 200
    finally:
        service.stop()


def test_a_chunked_upload_is_cut_off_by_its_running_count(limited: AsgiService) -> None:
    def body() -> Iterator[bytes]:  # no Content-Length: the server counts as it reads
        yield b'--b\r\nContent-Disposition: form-data; name="model"; filename="m.onnx"\r\n\r\n'
        for _ in range(20):
            yield b"\0" * (8 << 10)

    with limited.client() as client:
        response = client.post("/models", content=body(), headers={"content-type": "multipart/form-data; boundary=b"})
        assert assert_problem(response, 413)["limit"] in ("max_upload", "max_upload_total")
    assert limited.temporary_files() == []
