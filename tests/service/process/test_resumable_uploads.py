"""Resumable uploads (tus 1.0.0 under /uploads) against real server processes:
discovery, an upload in pieces imported exactly as a multipart upload of the
same bytes, external data from uploads, the protocol's refusals (412, 409,
413, 415, 400), tenants, a PATCH cut mid-body kept and resumed, two PATCHes at
once, expiry, termination, an incomplete import, the per-tenant count, the
space reserved in the store, and two front-end processes sharing the uploads."""

from __future__ import annotations

import base64
import itertools
import json
import os
import select
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.service_harness import SAMPLES, ServiceProcess, assert_problem, children_of, model_id_of, serving

from service.access.keys import new_key

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)

TUS = {"Tus-Resumable": "1.0.0"}
OCTETS = "application/offset+octet-stream"
MAX_UPLOAD = 256 << 10
MAX_TOTAL = 512 << 10


def add_model(seed: int, values: int = 6) -> bytes:
    """Y = X + W, W `values` floats made from `seed` (each test its own model, so its first import is a 201)."""
    weights = np.random.default_rng(seed).standard_normal(values).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])],
        f"add{seed}",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [values])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [values])],
        [numpy_helper.from_array(weights, name="W")],
    )
    data: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    return data


def weights_of(seed: int, values: int = 6) -> bytes:
    data: bytes = np.random.default_rng(seed).standard_normal(values).astype(np.float32).tobytes()
    return data


def metadata(filename: str) -> str:
    return "filename " + base64.b64encode(filename.encode()).decode()


def create(client: httpx.Client, length: int, auth: dict[str, str] | None = None, filename: str = "model.onnx") -> str:
    """A new upload's URL."""
    response = client.post("/uploads", headers={**TUS, **(auth or {}), "Upload-Length": str(length), "Upload-Metadata": metadata(filename)})
    assert response.status_code == 201, response.text
    assert response.headers["tus-resumable"] == "1.0.0"
    location = response.headers["location"]
    assert location.startswith("/uploads/") and len(location.rsplit("/", 1)[1]) == 32
    return location


def patch(client: httpx.Client, url: str, offset: int, data: Any, auth: dict[str, str] | None = None, **headers: str) -> httpx.Response:
    chosen = {**TUS, **(auth or {}), "Upload-Offset": str(offset), "Content-Type": OCTETS, **headers}
    return client.patch(url, headers=chosen, content=data)


def offset_of(client: httpx.Client, url: str, auth: dict[str, str] | None = None) -> int:
    response = client.head(url, headers={**TUS, **(auth or {})})
    assert response.status_code == 200, response.status_code
    return int(response.headers["upload-offset"])


def upload(client: httpx.Client, data: bytes, auth: dict[str, str] | None = None, filename: str = "model.onnx", pieces: int = 3) -> str:
    """The bytes as a finished upload, sent in `pieces` PATCHes; its id."""
    url = create(client, len(data), auth, filename)
    step = max(1, -(-len(data) // pieces))
    for offset in range(0, len(data), step):
        response = patch(client, url, offset, data[offset : offset + step], auth)
        assert response.status_code == 204, response.text
        assert response.headers["upload-offset"] == str(min(len(data), offset + step))
    return url.rsplit("/", 1)[1]


def uploads_held(server: ServiceProcess) -> set[str]:
    """The ids of the uploads the service holds (every tenant's): in the store's
    uploads folder, or on the fleet store the index's rows."""
    if server.fleet_store is not None:
        with psycopg.connect(server.fleet_store[1]) as connection:
            return {str(row[0]) for row in connection.execute("SELECT id FROM onnx_resumable_uploads")}
    root = server.store / "uploads"
    return {entry.name for folder in root.iterdir() if folder.is_dir() for entry in folder.iterdir() if not entry.name.startswith(".")}


def held_by_a_writer(client: httpx.Client, url: str, offset: int, auth: dict[str, str] | None = None) -> bool:
    """Another request is writing the upload: a PATCH without bytes is refused, 409 upload-busy."""
    answer = patch(client, url, offset, b"", auth)
    return answer.status_code == 409 and answer.json()["type"].endswith("/upload-busy")


def raw_patch(server: ServiceProcess, url: str, offset: int, length: int, auth: dict[str, str] | None = None) -> socket.socket:
    """A connection that has sent a PATCH's head announcing `length` bytes, and no byte of its body."""
    connection = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    fields = {**TUS, **(auth or {}), "Upload-Offset": str(offset), "Content-Type": OCTETS, "Content-Length": str(length)}
    head = f"PATCH {url} HTTP/1.1\r\nHost: x\r\n" + "".join(f"{name}: {value}\r\n" for name, value in fields.items()) + "\r\n"
    connection.sendall(head.encode())
    return connection


def writing_patch(
    server: ServiceProcess, client: httpx.Client, url: str, data: bytes, sent: int, auth: dict[str, str] | None = None
) -> socket.socket:
    """A raw PATCH of `data` that holds the upload, its first `sent` bytes sent.
    Each probe (`held_by_a_writer`) holds the upload for an instant too: a
    PATCH that asks for it in that instant is refused, 409 upload-busy, and
    closed. Such a PATCH is sent again, so that one does hold it."""
    deadline = time.monotonic() + 10
    while True:
        connection = raw_patch(server, url, 0, len(data), auth)
        connection.sendall(data[:sent])
        while time.monotonic() < deadline:
            if held_by_a_writer(client, url, sent, auth):
                return connection
            if select.select([connection], [], [], 0.05)[0]:  # it was answered: refused
                status, answer = read_status(connection)
                assert status == 409 and b"/upload-busy" in answer, answer
                connection.close()
                break
        else:
            connection.close()
            raise AssertionError("no PATCH came to hold the upload within 10 s")


def read_status(connection: socket.socket) -> tuple[int, bytes]:
    """The status and the whole answer: its head, then as much body as its content-length says (it may come later)."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65536)
        assert chunk, received
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    lengths = [line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    while len(body) < (int(lengths[0]) if lengths else 0) and (chunk := connection.recv(65536)):
        body += chunk
    return int(received.split(b" ", 2)[1]), head + b"\r\n\r\n" + body


def wait_until(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _keys(path: Path, *tenants: str) -> dict[str, dict[str, str]]:
    tables, headers = [], {}
    for tenant in tenants:
        secret, table = new_key(tenant, ["import", "read", "delete"])
        tables.append(table)
        headers[tenant] = {"Authorization": f"Bearer {secret}"}
    path.write_text("".join(tables))
    return headers


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, store_kind: str) -> Iterator[tuple[ServiceProcess, dict[str, dict[str, str]]]]:
    """A server with API keys (alice, bob) and small upload limits."""
    base = tmp_path_factory.mktemp("resumable")
    auth = _keys(base / "keys.toml", "alice", "bob")
    args = ("--api-keys", str(base / "keys.toml"), "--max-upload", str(MAX_UPLOAD), "--max-upload-total", str(MAX_TOTAL))
    with serving(base / "store", SAMPLES, *args) as server:
        yield server, auth


@pytest.fixture()
def server(keyed: tuple[ServiceProcess, dict[str, dict[str, str]]]) -> ServiceProcess:
    return keyed[0]


@pytest.fixture()
def alice(keyed: tuple[ServiceProcess, dict[str, dict[str, str]]]) -> dict[str, str]:
    return keyed[1]["alice"]


@pytest.fixture()
def bob(keyed: tuple[ServiceProcess, dict[str, dict[str, str]]]) -> dict[str, str]:
    return keyed[1]["bob"]


# --- the protocol


def test_options_says_what_the_server_speaks(server: ServiceProcess, alice: dict[str, str]) -> None:
    with server.client() as client:
        response = client.options("/uploads", headers=alice)
        assert response.status_code == 204
        assert response.headers["tus-resumable"] == "1.0.0"
        assert response.headers["tus-version"] == "1.0.0"
        assert response.headers["tus-extension"] == "creation,termination,expiration"
        assert response.headers["tus-max-size"] == str(MAX_TOTAL)
        refused = client.options("/uploads")  # the import scope, as POST /models
        assert_problem(refused, 401, "unauthorized")
        assert refused.headers["tus-resumable"] == "1.0.0"


def test_an_upload_in_three_pieces_imports_as_the_same_multipart_upload(server: ServiceProcess, alice: dict[str, str]) -> None:
    data = add_model(seed=1, values=4096)
    with server.client() as client:
        url = create(client, len(data), alice, filename="dir\\pieces.onnx")
        head = client.head(url, headers={**TUS, **alice})
        assert head.status_code == 200 and head.content == b""
        assert head.headers["upload-offset"] == "0" and head.headers["upload-length"] == str(len(data))
        assert head.headers["upload-metadata"] == metadata("dir\\pieces.onnx")
        assert head.headers["cache-control"] == "no-store" and head.headers["upload-expires"].endswith(" GMT")
        cuts = [0, 1000, 9000, len(data)]
        for start, end in itertools.pairwise(cuts):
            response = patch(client, url, start, data[start:end], alice)
            assert response.status_code == 204, response.text
            assert response.headers["upload-offset"] == str(end) and response.headers["upload-expires"].endswith(" GMT")
            assert offset_of(client, url, alice) == end
        upload_id = url.rsplit("/", 1)[1]
        imported = client.post("/models", json={"upload": upload_id}, headers=alice)
        assert imported.status_code == 201, imported.text
        summary = imported.json()
        assert summary["id"] == model_id_of(data, {}) and summary["input"] == "pieces.onnx"
        assert imported.headers["location"] == f"/models/{summary['id']}"
        assert client.get(f"/models/{summary['id']}/tensors/W", headers=alice).content == weights_of(1, 4096)
        # the uploads are gone once imported
        assert client.head(url, headers={**TUS, **alice}).status_code == 404
        assert upload_id not in uploads_held(server)
        # the one-shot multipart upload of the same file: the same model, the same summary
        again = client.post("/models", files={"model": ("pieces.onnx", data)}, headers=alice)
        assert again.status_code == 200 and again.json() == summary
    assert server.temporary_files() == []


def test_a_model_with_external_data_from_uploads(server: ServiceProcess, alice: dict[str, str]) -> None:
    folder = SAMPLES / "external"
    model, weights, bias = (
        (folder / "model.onnx").read_bytes(),
        (folder / "weights.bin").read_bytes(),
        (folder / "more" / "bias.bin").read_bytes(),
    )
    with server.client() as client:
        ids = [upload(client, data, alice, filename=name) for data, name in ((model, "model.onnx"), (weights, "w"), (bias, "b"))]
        wanted = {"upload": ids[0], "external_data": {"weights.bin": ids[1], "more/./bias.bin": ids[2]}}
        imported = client.post("/models", json=wanted, headers=alice)
        assert imported.status_code == 201, imported.text
        model_id = imported.json()["id"]
        assert model_id == model_id_of(model, {"weights.bin": weights, "more/bias.bin": bias})
        assert client.get(f"/models/{model_id}/tensors/W", headers=alice).content == weights[16 : 16 + 8192]
        assert client.get(f"/models/{model_id}/tensors/B", headers=alice).content == bias
        assert not set(ids) & uploads_held(server)
        files = [("model", ("model.onnx", model)), ("external_data", ("weights.bin", weights)), ("external_data", ("more/bias.bin", bias))]
        assert client.post("/models", files=files, headers=alice).json()["id"] == model_id
        # an external file no tensor uses refuses the content: the uploads go
        lone, extra = upload(client, add_model(seed=2), alice), upload(client, b"unused", alice)
        refused = client.post("/models", json={"upload": lone, "external_data": {"x.bin": extra}}, headers=alice)
        assert_problem(refused, 400, "bad-request")
        assert not {lone, extra} & uploads_held(server)
        # a location the multipart rules refuse, and requests that are not one thing: refused, the uploads kept
        kept = upload(client, add_model(seed=3), alice)
        assert_problem(client.post("/models", json={"upload": kept, "external_data": {"../x": kept}}, headers=alice), 400, "path-refused")
        assert_problem(client.post("/models", json={"upload": kept, "path": "add.onnx"}, headers=alice), 422, "validation-error")
        assert_problem(client.post("/models", json={"path": "add.onnx", "external_data": {}}, headers=alice), 422, "validation-error")
        assert_problem(client.post("/models", json={"upload": "not-an-id"}, headers=alice), 422, "validation-error")
        assert_problem(client.post("/models", json={"upload": "0" * 32}, headers=alice), 404, "not-found")
        assert kept in uploads_held(server)
        assert client.post("/models", json={"upload": kept}, headers=alice).status_code == 201


def test_the_protocol_refusals(server: ServiceProcess, alice: dict[str, str]) -> None:
    with server.client() as client:
        url = create(client, 100, alice)
        # no Tus-Resumable (or another version): 412 with Tus-Version, on every route
        for method in ("POST", "PATCH", "DELETE"):
            target = "/uploads" if method == "POST" else url
            headers = {**alice, "Upload-Length": "10", "Upload-Offset": "0", "Content-Type": OCTETS}
            refused = client.request(method, target, headers=headers)
            assert_problem(refused, 412, "tus-version-unsupported")
            assert refused.headers["tus-version"] == "1.0.0" and refused.headers["tus-resumable"] == "1.0.0"
        head = client.head(url, headers={**alice, "Tus-Resumable": "0.2.2"})
        assert head.status_code == 412 and head.headers["tus-version"] == "1.0.0" and head.content == b""
        # creation: the length required, decimal, within --max-upload-total; metadata well formed
        for headers in ({}, {"Upload-Length": "-1"}, {"Upload-Length": "1e3"}, {"Upload-Defer-Length": "1"}):
            assert_problem(client.post("/uploads", headers={**TUS, **alice, **headers}), 400, "bad-request")
        too_big = client.post("/uploads", headers={**TUS, **alice, "Upload-Length": str(MAX_TOTAL + 1)})
        assert assert_problem(too_big, 413, "payload-too-large")["limit"] == "max_upload_total"
        bad_metadata = ["filename !!!", "filename YQ==,filename YQ==", "a b c", "=x YQ==,,", "filename /w==", "x " + "QQ==" * 2000]
        for bad in bad_metadata:  # not base64, a key twice, an empty pair, a filename not UTF-8, too long
            response = client.post("/uploads", headers={**TUS, **alice, "Upload-Length": "1", "Upload-Metadata": bad})
            assert_problem(response, 400, "bad-request")
        bare = client.post("/uploads", headers={**TUS, **alice, "Upload-Length": "1", "Upload-Metadata": "filename,other YQ=="})
        assert bare.status_code == 201  # a key without a value is allowed
        assert client.delete(bare.headers["location"], headers={**TUS, **alice}).status_code == 204
        with_body = client.post("/uploads", headers={**TUS, **alice, "Upload-Length": "3"}, content=b"abc")
        assert_problem(with_body, 400, "bad-request")
        # PATCH: the media type, the offset the server holds, nothing past the length
        assert_problem(patch(client, url, 0, b"x", alice, **{"Content-Type": "application/octet-stream"}), 415, "unsupported-media-type")
        assert_problem(client.patch(url, headers={**TUS, **alice, "Content-Type": OCTETS}, content=b"x"), 400, "bad-request")
        assert patch(client, url, 0, b"a" * 10, alice).status_code == 204
        wrong = patch(client, url, 5, b"b", alice)
        problem = assert_problem(wrong, 409, "upload-offset-mismatch")
        assert wrong.headers["upload-offset"] == "10" and problem["upload_offset"] == 10 and "10" in problem["detail"]
        assert assert_problem(patch(client, url, 10, b"c" * 91, alice), 413, "payload-too-large")["limit"] == "upload_length"
        assert offset_of(client, url, alice) == 10  # a declared length past the end: nothing written

        def chunked() -> Iterator[bytes]:
            yield b"d" * 60
            yield b"e" * 60

        assert_problem(patch(client, url, 10, chunked(), alice), 413, "payload-too-large")
        assert offset_of(client, url, alice) == 100  # sent without a length: kept up to the end, never past it
        assert url.rsplit("/", 1)[1] in uploads_held(server)
        assert_problem(
            client.patch("/uploads/" + "0" * 32, headers={**TUS, **alice, "Upload-Offset": "0", "Content-Type": OCTETS}), 404, "not-found"
        )
        assert client.delete(url, headers={**TUS, **alice}).status_code == 204


def test_another_tenant_sees_nothing(server: ServiceProcess, alice: dict[str, str], bob: dict[str, str]) -> None:
    with server.client() as client:
        url = create(client, 10, alice)
        assert patch(client, url, 0, b"12345", alice).status_code == 204
        upload_id = url.rsplit("/", 1)[1]
        missing = "/uploads/" + "f" * 32
        for target in (url, missing):
            head = client.head(target, headers={**TUS, **bob})
            assert head.status_code == 404 and head.content == b"" and head.headers["tus-resumable"] == "1.0.0"
            theirs = assert_problem(patch(client, target, 5, b"678", bob), 404, "not-found")
            assert assert_problem(client.delete(target, headers={**TUS, **bob}), 404, "not-found")["title"] == theirs["title"]
        assert_problem(client.post("/models", json={"upload": upload_id}, headers=bob), 404, "not-found")
        assert client.head(url, headers=TUS).status_code == 401
        assert offset_of(client, url, alice) == 5  # untouched
        assert client.delete(url, headers={**TUS, **alice}).status_code == 204


def test_a_patch_cut_mid_body_keeps_what_arrived_and_resumes(server: ServiceProcess, alice: dict[str, str]) -> None:
    data = add_model(seed=4, values=32 << 10)  # 128 KiB of weights
    half = len(data) // 2
    with server.client() as client:
        url = create(client, len(data), alice)
        connection = raw_patch(server, url, 0, len(data), alice)
        connection.sendall(data[:half])
        time.sleep(0.3)
        connection.close()  # gone mid-body
        wait_until(lambda: offset_of(client, url, alice) == half)
        deadline = time.monotonic() + 10
        while (resumed := patch(client, url, half, data[half:], alice)).status_code == 409:  # the cut request may still hold it
            assert resumed.json()["type"].endswith("/upload-busy") and time.monotonic() < deadline
            time.sleep(0.05)
        assert resumed.status_code == 204 and resumed.headers["upload-offset"] == str(len(data))
        imported = client.post("/models", json={"upload": url.rsplit("/", 1)[1]}, headers=alice)
        assert imported.status_code == 201 and imported.json()["id"] == model_id_of(data, {})
        assert client.get(f"/models/{imported.json()['id']}/tensors/W", headers=alice).content == weights_of(4, 32 << 10)


def test_a_second_patch_while_one_writes_is_409(server: ServiceProcess, alice: dict[str, str]) -> None:
    data = bytes(range(256)) * 64
    with server.client() as client:
        url = create(client, len(data), alice)
        connection = writing_patch(server, client, url, data, 1000, alice)
        try:
            if server.fleet_store is None:  # written as they arrive (the fleet's offset is what is durable: the PATCH's end, a part)
                # the PATCH holds the upload from its head on; its first bytes are written a moment after (on a busy machine,
                # after a HEAD asked at once: 0 in the bare container)
                wait_until(lambda: offset_of(client, url, alice) == 1000)
            busy = patch(client, url, 1000, data[1000:], alice)
            assert "another request is writing" in assert_problem(busy, 409, "upload-busy")["detail"]
            assert "upload-offset" not in busy.headers
            connection.sendall(data[1000:])
            status, _ = read_status(connection)
            assert status == 204
        finally:
            connection.close()
        assert offset_of(client, url, alice) == len(data)
        assert client.delete(url, headers={**TUS, **alice}).status_code == 204


def test_an_incomplete_upload_is_not_imported(server: ServiceProcess, alice: dict[str, str]) -> None:
    data = add_model(seed=5)
    with server.client() as client:
        model_id = upload(client, data, alice)
        url = create(client, 100, alice)
        assert patch(client, url, 0, b"x" * 40, alice).status_code == 204
        partial = url.rsplit("/", 1)[1]
        refused = client.post("/models", json={"upload": model_id, "external_data": {"w.bin": partial}}, headers=alice)
        problem = assert_problem(refused, 409, "upload-incomplete")
        assert problem["upload"] == partial and problem["upload_offset"] == 40 and partial in problem["detail"]
        assert {model_id, partial} <= uploads_held(server)  # both kept
        assert offset_of(client, url, alice) == 40
        too_big = upload(client, b"\0" * (MAX_UPLOAD + 1), alice, pieces=1)
        assert assert_problem(client.post("/models", json={"upload": too_big}, headers=alice), 413)["limit"] == "max_upload"
        for upload_id in (model_id, partial, too_big):
            assert client.delete(f"/uploads/{upload_id}", headers={**TUS, **alice}).status_code == 204


def test_delete_removes_the_upload(server: ServiceProcess, alice: dict[str, str]) -> None:
    with server.client() as client:
        url = create(client, 50, alice)
        assert patch(client, url, 0, b"y" * 20, alice).status_code == 204
        upload_id = url.rsplit("/", 1)[1]
        assert upload_id in uploads_held(server)
        assert client.delete(url, headers={**TUS, **alice}).status_code == 204
        assert upload_id not in uploads_held(server)
        assert client.head(url, headers={**TUS, **alice}).status_code == 404
        assert_problem(client.delete(url, headers={**TUS, **alice}), 404, "not-found")
        assert_problem(patch(client, url, 20, b"z", alice), 404, "not-found")


def test_the_routes_are_documented(server: ServiceProcess) -> None:
    with server.client() as client:
        paths = client.get("/openapi.json").json()["paths"]
    expected = {
        ("/uploads", "options"): {"204"},
        ("/uploads", "post"): {"201", "400", "412", "413", "429", "507"},
        ("/uploads/{upload_id}", "head"): {"200", "404", "412"},
        ("/uploads/{upload_id}", "patch"): {"204", "404", "408", "409", "412", "413", "415", "503"},
        ("/uploads/{upload_id}", "delete"): {"204", "404"},
    }
    for (path, method), statuses in expected.items():
        operation = paths[path][method]
        assert operation["summary"] and statuses <= set(operation["responses"]), (path, method)
        for status, response in operation["responses"].items():
            if status == "default" or status[0] in "45":
                assert "application/problem+json" in response["content"], (path, status)
    assert "application/offset+octet-stream" in paths["/uploads/{upload_id}"]["patch"]["requestBody"]["content"]
    assert "upload" in json.dumps(paths["/models"]["post"]["requestBody"]["content"]["application/json"])


# --- servers of their own


def test_expired_uploads_are_refused_and_removed(tmp_path: Path) -> None:
    with serving(tmp_path / "store", SAMPLES, "--upload-expiry", "3") as server, server.client() as client:
        swept, refused = create(client, 10), create(client, 10)
        assert patch(client, swept, 0, b"abc").status_code == 204
        assert {url.rsplit("/", 1)[1] for url in (swept, refused)} == uploads_held(server)
        kept, written, created = create(client, 1000), 0, time.monotonic()
        # until the periodic sweep (every 0.75 s) took the other two, and kept is held past its own first expiry
        while uploads_held(server) != {kept.rsplit("/", 1)[1]} or time.monotonic() - created < 4.5:
            assert time.monotonic() - created < 20, f"held after {written} PATCHes: {uploads_held(server)}"
            time.sleep(0.5)  # a PATCH every half second renews kept's expiry, whatever the machine's load
            assert patch(client, kept, written, b"k").status_code == 204
            written += 1
        assert client.head(swept, headers=TUS).status_code == 404
        assert_problem(patch(client, refused, 0, b"x"), 404, "not-found")
        assert offset_of(client, kept) == written


def test_max_open_uploads_and_the_space_reserved(tmp_path: Path) -> None:
    args = ("--max-upload", "1024TiB", "--max-upload-total", "1024TiB", "--max-open-uploads", "3", "--store-min-free", "64MiB",
            "--store-max-bytes", "1024TiB", "--tenant-max-reserved", "100%")  # fmt: skip
    with serving(tmp_path / "store", SAMPLES, *args) as server, server.client() as client:
        free = os.statvfs(server.store).f_bavail * os.statvfs(server.store).f_frsize
        # the declared length of every upload counts: past the free space over the floor, 507
        full = client.post("/uploads", headers={**TUS, "Upload-Length": str(free)})
        assert_problem(full, 507, "store-full")
        assert full.headers["tus-resumable"] == "1.0.0"
        if free < 2 << 30:
            pytest.skip("the reservation of two uploads needs 2 GiB free here")
        first = create(client, free - (64 << 20) - (512 << 20))  # leaves about 512 MiB
        assert_problem(client.post("/uploads", headers={**TUS, "Upload-Length": str(1 << 30)}), 507, "store-full")
        second = create(client, 1 << 20)
        third = create(client, 1 << 20)
        over = client.post("/uploads", headers={**TUS, "Upload-Length": "1"})
        assert assert_problem(over, 429, "too-many-uploads")["limit"] == "max_open_uploads"
        assert client.delete(first, headers=TUS).status_code == 204  # its reservation goes with it
        fourth = create(client, 1 << 30)
        for url in (second, third, fourth):
            assert client.delete(url, headers=TUS).status_code == 204
        assert uploads_held(server) == set()


def test_a_tenants_reservations_leave_another_tenants_models_and_imports_alone(tmp_path: Path) -> None:
    """The issue's attack, with default settings: alice reserves until she is
    refused (her share of the store's room, --tenant-max-reserved, having sent
    nothing); bob's models stay, and his new upload and import find room."""
    auth = _keys(tmp_path / "keys.toml", "alice", "bob")
    with serving(tmp_path / "store", SAMPLES, "--api-keys", str(tmp_path / "keys.toml")) as server, server.client() as client:
        bobs = []
        for seed in (351, 352):
            response = client.post("/models", files={"model": ("b.onnx", add_model(seed))}, headers=auth["bob"])
            assert response.status_code == 201, response.text
            bobs.append(response.json()["id"])
        refused = None
        for _ in range(32):  # --max-open-uploads
            response = client.post("/uploads", headers={**TUS, **auth["alice"], "Upload-Length": str(1 << 30)})
            if response.status_code != 201:
                refused = response
                break
        assert refused is not None, "alice reserved 32 GiB"
        assert assert_problem(refused, 507, "tenant-quota-exceeded")["limit"] == "tenant_max_reserved"
        create(client, 1 << 20, auth["bob"])
        imported = client.post("/models", files={"model": ("c.onnx", add_model(353))}, headers=auth["bob"])
        assert imported.status_code == 201, imported.text
        for model_id in (*bobs, imported.json()["id"]):
            assert client.get(f"/models/{model_id}", headers=auth["bob"]).status_code == 200
        assert set(bobs) <= server.stored_contents()


def _front_ends(server: ServiceProcess) -> list[int]:
    assert server.process is not None
    return [pid for pid in children_of(server.process.pid) if children_of(pid)]


def _bytes_written(pid: int) -> int:
    """What the process wrote to files (a PATCH's bytes): /proc/PID/io, or its CPU ticks where that is closed to us."""
    try:
        fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
        return int(fields["wchar"])
    except PermissionError:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(stat[11]) + int(stat[12])) << 20  # a tick counts as a MiB


def test_two_front_ends_share_the_uploads(tmp_path: Path) -> None:
    with serving(tmp_path / "store", SAMPLES, "--http-workers", "2", "--workers", "1") as server:
        wait_until(lambda: len(_front_ends(server)) == 2 and server.log.read_text().count(" ready: data root ") >= 2, 30)
        pids = _front_ends(server)
        before = {pid: _bytes_written(pid) for pid in pids}
        models = {seed: add_model(seed, values=256 << 10) for seed in range(10, 16)}  # 1 MiB each

        def send(seed: int) -> str:
            data, piece = models[seed], 256 << 10
            with httpx.Client(base_url=server.url, timeout=60, headers={"Connection": "close"}) as client:  # a connection per request
                url = create(client, len(data))
                for offset in range(0, len(data), piece):
                    assert patch(client, url, offset, data[offset : offset + piece]).status_code == 204
                return url.rsplit("/", 1)[1]

        with ThreadPoolExecutor(6) as pool:
            ids = dict(zip(models, pool.map(send, models), strict=True))
        written = {pid: _bytes_written(pid) - before[pid] for pid in pids}
        assert all(amount >= 256 << 10 for amount in written.values()), written  # both front ends took PATCHes
        # one upload, piece after piece over new connections: each piece's process, by what it wrote (which
        # process accepts a connection is the kernel's choice: 128 pieces, so both take some however it leans)
        data, piece, served = add_model(seed=16, values=256 << 10), 8 << 10, []
        with httpx.Client(base_url=server.url, timeout=60, headers={"Connection": "close"}) as client:
            url = create(client, len(data))
            for offset in range(0, len(data), piece):
                before = {pid: _bytes_written(pid) for pid in pids}
                assert patch(client, url, offset, data[offset : offset + piece]).status_code == 204
                served.append(max(pids, key=lambda pid: _bytes_written(pid) - before[pid]))
        assert set(served) == set(pids), served  # resumed on the other process, and back
        models[16], ids[16] = data, url.rsplit("/", 1)[1]
        with server.client(headers={"Connection": "close"}) as client:
            for seed, upload_id in ids.items():
                imported = client.post("/models", json={"upload": upload_id})
                assert imported.status_code == 201, imported.text
                assert imported.json()["id"] == model_id_of(models[seed], {})
                assert client.get(f"/models/{imported.json()['id']}/tensors/W").content == weights_of(seed, 256 << 10)
        assert uploads_held(server) == set()
