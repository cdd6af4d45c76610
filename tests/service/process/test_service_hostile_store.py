"""Hostile traffic against the store and the data root, with real processes:
a link swapped under a running import, a model file swapped before the worker
reads it, hard-linked models, uploads that must stay apart from data-root
imports, unused external parts, the bytes one import may add, slow bodies,
the bound on uploads being received, and a full store (a small tmpfs, where
the tests run as root).

Why a process: the attacks race a running service process: files swapped under
its workers, slow or silent bodies on its sockets (408), its uploads being
received, a store on a small tmpfs filling up, with the test hooks of a
service process and its log.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.faults import FAULTS
from support.service_harness import SAMPLES, ServiceProcess, assert_problem, copy_samples, model_id_of, serving

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)

HOOKS = FAULTS  # the X-Test-* headers (support/faults.py)


def weights_model(path: Path, values: np.ndarray, location: str | None = None) -> Path:
    """Y = X + W; W inline, or in external data at `location` (next to the model)."""
    w = numpy_helper.from_array(values, "W")
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])],
        "weights",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(values.shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, list(values.shape))],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path.parent.mkdir(parents=True, exist_ok=True)
    if location is None:
        onnx.save(model, str(path))
    else:
        (path.parent / location).parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(path), save_as_external_data=True, location=location, size_threshold=0)
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, data_root: Path, store_kind: str) -> Iterator[ServiceProcess]:
    """One server (test hooks on) over the module's `data_root` (support/servers.py),
    for the tests that each lay out and import files of their own; the test that
    hard-links a sample has a data root and a server of its own."""
    with serving(tmp_path_factory.mktemp("hostile-store") / "store", data_root, env=HOOKS) as service:
        yield service


def in_background(call: object) -> tuple[threading.Thread, list[httpx.Response]]:
    results: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: results.append(call()))  # type: ignore[operator]
    thread.start()
    return thread, results


def test_a_folder_swapped_for_a_link_after_the_worker_read_it_serves_nothing_from_outside(
    tmp_path: Path, data_root: Path, server: ServiceProcess
) -> None:
    inside = np.arange(8, dtype=np.float32)
    weights_model(data_root / "race" / "model.onnx", inside, location="sub/secret.bin")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.bin").write_bytes(b"LEAK" * (inside.nbytes // 4))
    with server.client() as client:
        thread, results = in_background(
            lambda: client.post("/models", json={"path": "race/model.onnx"}, headers={"X-Test-Pause-Before-Commit": "3"})
        )
        server.wait_for_log("import of 'race/model.onnx': ok")  # the worker has read the files; the commit waits
        os.rename(data_root / "race" / "sub", data_root / "race" / "sub.real")
        os.symlink(outside, data_root / "race" / "sub")
        thread.join(30)
        (response,) = results
        assert response.status_code == 201, response.text
        model_id = response.json()["id"]
        got = client.get(f"/models/{model_id}/tensors/W")
        assert b"LEAK" not in got.content
        assert_problem(got, 409, "tensor-source-changed")
        # the link removed and the real folder back: the very file read at import is served again
        os.unlink(data_root / "race" / "sub")
        os.rename(data_root / "race" / "sub.real", data_root / "race" / "sub")
        assert client.get(f"/models/{model_id}/tensors/W").content == inside.tobytes()
        # the data-root file in the record is the one the worker hashed: the id is the inside file's
        expected = model_id_of((data_root / "race" / "model.onnx").read_bytes(), {"sub/secret.bin": inside.tobytes()}, origin="path")
        assert model_id == expected


def test_a_model_file_replaced_before_the_worker_reads_it_is_refused(data_root: Path, server: ServiceProcess) -> None:
    first = weights_model(data_root / "swap" / "model.onnx", np.zeros(4, np.float32))
    weights_model(data_root / "swap" / "other.onnx", np.ones(4, np.float32))
    with server.client() as client:
        thread, results = in_background(
            lambda: client.post("/models", json={"path": "swap/model.onnx"}, headers={"X-Test-Worker-Sleep": "2"})
        )
        time.sleep(0.8)  # resolved by the front end; the worker sleeps before it opens anything
        os.replace(data_root / "swap" / "other.onnx", first)
        thread.join(30)
    body = assert_problem(results[0], 409, "model-source-changed")
    assert body["kind"] == "Io"


def test_hard_linked_models_are_refused_unless_allowed(tmp_path: Path) -> None:
    data_root = copy_samples(tmp_path / "root")  # add.onnx gets a second link: not in the module's data root
    os.link(data_root / "add.onnx", data_root / "hard.onnx")
    with serving(tmp_path / "store", data_root, env=HOOKS) as server, server.client() as client:
        body = assert_problem(client.post("/models", json={"path": "hard.onnx"}), 403, "path-forbidden")
        assert "2 hard links" in body["detail"]
    with serving(tmp_path / "store-allowing", data_root, "--allow-hard-links") as allowing, allowing.client() as client:
        assert client.post("/models", json={"path": "hard.onnx"}).status_code == 201


def test_an_upload_is_stored_apart_from_a_data_root_import_and_keeps_its_own_name(data_root: Path, server: ServiceProcess) -> None:
    model = (data_root / "add.onnx").read_bytes()
    with server.client() as client:
        by_path = client.post("/models", json={"path": "add.onnx"}).json()["id"]
        first = client.post("/models", files={"model": ("acme-confidential-fraud-detector-v7.onnx", model)})
        second = client.post("/models", files={"model": ("bob.onnx", model)})
        assert (first.status_code, second.status_code) == (201, 200)
        assert first.json()["id"] == second.json()["id"] != by_path
        assert second.json()["input"] == "bob.onnx" and "acme" not in second.text
        (data_root / "add.onnx").write_bytes(model)  # the data-root file changes (mtime): the upload does not care
        assert_problem(client.get(f"/models/{by_path}/tensors/W"), 409, "tensor-source-changed")
        assert client.get(f"/models/{first.json()['id']}/tensors/W").status_code == 200


def test_unused_external_parts_are_refused(server: ServiceProcess) -> None:
    files = [
        ("model", ("m.onnx", (SAMPLES / "external" / "model.onnx").read_bytes())),
        ("external_data", ("weights.bin", (SAMPLES / "external" / "weights.bin").read_bytes())),
        ("external_data", ("more/bias.bin", (SAMPLES / "external" / "more" / "bias.bin").read_bytes())),
        ("external_data", ("padding.bin", b"\0" * 100_000)),
    ]
    with server.client() as client:
        body = assert_problem(client.post("/models", files=files), 400, "bad-request")
        assert "padding.bin" in body["detail"]
        assert client.post("/models", files=files[:3]).status_code == 201
    assert server.temporary_files() == []


def test_the_bytes_one_import_may_add_are_bounded(tmp_path: Path, data_root: Path) -> None:
    zeros = helper.make_tensor("Z", TensorProto.INT64, [300_000], [0] * 300_000)  # ~300 KB in the file, 2.4 MB converted
    graph = helper.make_graph(
        [helper.make_node("Identity", ["Z"], ["Y"])], "zeros", [], [helper.make_tensor_value_info("Y", TensorProto.INT64, None)], [zeros]
    )
    amplifying = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    with serving(tmp_path / "store", data_root, "--max-import-bytes", "1MiB") as server, server.client() as client:
        body = assert_problem(client.post("/models", files={"model": ("zeros.onnx", amplifying)}), 413, "payload-too-large")
        assert body["limit"] == "max_import_bytes"
        big = np.zeros(400_000, np.float32).tobytes()  # 1.6 MB uploaded
        body = assert_problem(client.post("/models", files={"model": ("m.onnx", b"\x08\x0a" + big)}), 413, "payload-too-large")
        assert client.post("/models", json={"path": "add.onnx"}).status_code == 201
        assert server.temporary_files() == []


def _multipart_head(boundary: str, length: int) -> bytes:
    return (
        f"POST /models HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary={boundary}\r\n"
        f"Content-Length: {length}\r\n\r\n--{boundary}\r\n"
        'Content-Disposition: form-data; name="model"; filename="slow.onnx"\r\n\r\n'
    ).encode()


@contextlib.contextmanager
def slow_upload(port: int) -> Iterator[socket.socket]:
    """A connection that has sent an upload's head and part of its body."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        connection.sendall(_multipart_head("b", 10_000_000))
        yield connection
    finally:
        connection.close()


def _answer(connection: socket.socket) -> bytes:
    data = b""
    with contextlib.suppress(OSError):
        while chunk := connection.recv(65536):
            data += chunk
    return data


def test_a_silent_or_slow_body_is_a_408(tmp_path: Path, data_root: Path) -> None:
    args = ("--body-timeout", "1", "--min-upload-rate", "1KiB")
    with serving(tmp_path / "store", data_root, *args) as server:
        with slow_upload(server.port) as silent:
            started = time.monotonic()
            answer = _answer(silent)
            assert answer.startswith(b"HTTP/1.1 408") and b"request-timeout" in answer
            assert time.monotonic() - started < 5
        with slow_upload(server.port) as trickling:
            started = time.monotonic()
            answer = b""
            trickling.settimeout(0.4)
            while time.monotonic() - started < 8 and not answer:
                with contextlib.suppress(OSError):
                    trickling.sendall(b"x")  # never silent for a second, but 2-3 bytes/s
                with contextlib.suppress(TimeoutError):
                    answer = trickling.recv(65536)
            trickling.settimeout(5)
            answer += _answer(trickling)  # the head and the problem body may come in separate packets
            assert answer.startswith(b"HTTP/1.1 408") and b"bytes/s" in answer
        assert server.temporary_files() == []


def test_uploads_being_received_are_bounded_apart_from_the_import_queue(tmp_path: Path, data_root: Path) -> None:
    args = ("--max-receiving", "2", "--workers", "1", "--queue", "0", "--body-timeout", "30")
    with serving(tmp_path / "store", data_root, *args) as server, server.client() as client:
        with slow_upload(server.port), slow_upload(server.port):
            deadline = time.monotonic() + 10
            while client.get("/readyz").json()["uploads_receiving"] < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            ready = client.get("/readyz").json()
            assert ready["uploads_receiving"] == 2 and ready["saturated"] is True
            assert_problem(client.post("/models", files={"model": ("m.onnx", b"\x08\x0a")}), 503, "overloaded")
            # the one import place is free: slow bodies hold receiving places, never import places
            assert client.post("/models", json={"path": "add.onnx"}).status_code == 201
        deadline = time.monotonic() + 10
        while client.get("/readyz").json()["uploads_receiving"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.post("/models", files={"model": ("m.onnx", (data_root / "add.onnx").read_bytes())}).status_code == 201


# --- a full store: a small tmpfs (root only)


@contextlib.contextmanager
def small_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip() or 'mount failed'}); the full-store test needs root")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def free_bytes(folder: Path) -> int:
    info = os.statvfs(folder)
    return info.f_bavail * info.f_frsize


def fill(folder: Path, leave: int) -> Path:
    """A filler file taking all but about `leave` bytes of the file system."""
    filler = folder / "filler"
    with open(filler, "ab") as out:
        want = free_bytes(folder) - leave
        block = b"\0" * (1 << 16)
        while want > 0:
            try:
                out.write(block[: min(len(block), want)])
                out.flush()
            except OSError:
                break
            want -= min(len(block), want)
    return filler


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting the small tmpfs for a full store needs root")
def test_a_full_store_answers_507_evicts_and_recovers_without_a_restart(tmp_path: Path, data_root: Path) -> None:
    weights_model(data_root / "big.onnx", np.random.default_rng(0).standard_normal(250_000).astype(np.float32))  # 1 MB
    with small_tmpfs(tmp_path / "small", "8m") as disk:
        args = ("--store-min-free", "1MiB")
        with serving(disk / "store", data_root, *args) as server, server.client() as client:
            first = client.post("/models", json={"path": "big.onnx"})
            assert first.status_code == 201
            uploaded = client.post("/models", files={"model": ("big.onnx", (data_root / "big.onnx").read_bytes())})
            assert uploaded.status_code == 201  # 1 MB in the store
            # below the floor: not ready, and the next import evicts the least recently used model
            filler = fill(disk, leave=512 << 10)
            body = assert_problem(client.get("/readyz"), 503, "not-ready")
            assert "free" in body["detail"]
            evicting = client.post("/models", json={"path": "add.onnx"})
            assert evicting.status_code == 201, evicting.text
            assert_problem(client.get(f"/models/{uploaded.json()['id']}"), 404)
            # nothing left to evict, the file system full: 507 for paths and uploads alike
            fill(disk, leave=0)
            assert_problem(client.post("/models", json={"path": "typed_fields.onnx"}), 507, "store-full")
            upload = client.post("/models", files={"model": ("m.onnx", (data_root / "if_subgraph.onnx").read_bytes())})
            assert_problem(upload, 507, "store-full")
            assert server.temporary_files() == []
            # space returns: ready and importing again, without a restart
            filler.unlink()
            assert client.get("/readyz").status_code == 200
            assert client.post("/models", json={"path": "typed_fields.onnx"}).status_code == 201
            # a write that fails half way (the body larger than the space left above the floor): 507, nothing kept
            fill(disk, leave=(1 << 20) + (300 << 10))
            upload = client.post("/models", files={"model": ("big2.onnx", (data_root / "big.onnx").read_bytes() * 2)})
            assert_problem(upload, 507, "store-full")
            assert server.temporary_files() == []
            assert client.get(f"/models/{client.post('/models', json={'path': 'add.onnx'}).json()['id']}").status_code == 200


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting the small tmpfs for a full store needs root")
def test_a_507_evicts_nothing_and_its_room_is_free_at_once(tmp_path: Path, data_root: Path) -> None:
    """The issue's full store: an upload creation and a one-shot upload too
    large for the room left are refused (507) with every model kept, and the
    refused upload's bytes are freed before its answer, so that a small
    upload right after it is a 201 (nothing evicted either)."""
    model = (data_root / "add.onnx").read_bytes()
    with (
        small_tmpfs(tmp_path / "small", "24m") as disk,
        serving(disk / "store", data_root, "--store-min-free", "1MiB") as server,
        server.client() as client,
    ):
        kept = []
        for seed in range(2):
            values = np.random.default_rng(seed).standard_normal(250_000).astype(np.float32)  # 1 MB each
            path = weights_model(data_root / f"kept{seed}.onnx", values)
            response = client.post("/models", files={"model": (path.name, path.read_bytes())})
            assert response.status_code == 201, response.text
            kept.append(response.json()["id"])
        fill(disk, leave=(1 << 20) + (3 << 20))  # about 3 MiB above the floor

        def all_kept() -> bool:
            return all(client.get(f"/models/{model_id}").status_code == 200 for model_id in kept)

        creation = client.post("/uploads", headers={"Tus-Resumable": "1.0.0", "Upload-Length": str(8 << 20)})
        assert "evicts no model" in assert_problem(creation, 507, "store-full")["detail"]
        assert all_kept()
        free_before = free_bytes(disk)
        big = weights_model(data_root / "too-big.onnx", np.ones(2_500_000, dtype=np.float32))  # 10 MB
        assert_problem(client.post("/models", files={"model": ("too-big.onnx", big.read_bytes())}), 507, "store-full")
        assert free_bytes(disk) >= free_before - (256 << 10)  # its bytes gone before its answer
        small = client.post("/models", files={"model": ("small.onnx", model)})
        assert small.status_code == 201, small.text
        assert all_kept()
        assert server.temporary_files() == []
