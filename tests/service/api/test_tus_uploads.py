"""Resumable uploads (tus 1.0.0 under /uploads), in the test process over
ASGI (support.asgi_service, its workers real): discovery, an upload in pieces
imported exactly as a multipart upload of the same bytes, external data from
uploads, the protocol's refusals (412, 409, 413, 415, 400), a model upload
refused at the PATCH that finishes it (422, the upload removed), tenants, an
incomplete import, termination, the routes' documentation, expiry, the
per-tenant count, the space reserved in the store, and one tenant's
reservations leaving another's models and imports alone. A PATCH cut on the
wire, two PATCHes at once on their connections, and two front-end
processes: process/test_resumable_uploads.py."""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.asgi_service import AsgiService, serving_over_asgi
from support.service_harness import SAMPLES, assert_problem, model_id_of
from support.small_models import external_weight_model
from support.tus_uploads import (
    MAX_TOTAL,
    MAX_UPLOAD,
    OCTETS,
    TUS,
    add_model,
    create,
    keyed_settings,
    metadata,
    offset_of,
    patch,
    tenant_keys,
    upload,
    uploads_held,
    weights_of,
)

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, store_kind: str) -> Iterator[tuple[AsgiService, dict[str, dict[str, str]]]]:
    """A server with API keys (alice, bob) and small upload limits."""
    base = tmp_path_factory.mktemp("resumable")
    auth, args = keyed_settings(base)
    with serving_over_asgi(base / "store", SAMPLES, *args) as server:
        yield server, auth


@pytest.fixture()
def server(keyed: tuple[AsgiService, dict[str, dict[str, str]]]) -> AsgiService:
    return keyed[0]


@pytest.fixture()
def alice(keyed: tuple[AsgiService, dict[str, dict[str, str]]]) -> dict[str, str]:
    return keyed[1]["alice"]


@pytest.fixture()
def bob(keyed: tuple[AsgiService, dict[str, dict[str, str]]]) -> dict[str, str]:
    return keyed[1]["bob"]


# --- the protocol


def test_options_says_what_the_server_speaks(server: AsgiService, alice: dict[str, str]) -> None:
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


def test_an_upload_in_three_pieces_imports_as_the_same_multipart_upload(server: AsgiService, alice: dict[str, str]) -> None:
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


def test_a_model_with_external_data_from_uploads(server: AsgiService, alice: dict[str, str]) -> None:
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


def test_the_protocol_refusals(server: AsgiService, alice: dict[str, str]) -> None:
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


def test_the_patch_that_finishes_a_model_upload_answers_its_refusal(server: AsgiService, alice: dict[str, str]) -> None:
    model = external_weight_model("../weights.bin", 64)  # a location outside the rules: refused by the model alone
    with server.client() as client:
        url = create(client, len(model), alice, "early.onnx", part="model")
        half = len(model) // 2
        assert patch(client, url, 0, model[:half], alice).status_code == 204  # not finished: not read
        problem = assert_problem(patch(client, url, half, model[half:], alice), 422)
        assert problem["kind"] == "ExternalData" and "'..'" in problem["detail"]
        assert problem["field_path"] == "ModelProto.graph.initializer[0]" and isinstance(problem["offset"], int)
        assert problem["input"] == "early.onnx"
        assert url.rsplit("/", 1)[1] not in uploads_held(server)  # refused content: removed, as its import would
        assert client.head(url, headers={**TUS, **alice}).status_code == 404
        # the same bytes in an upload that does not say it holds a model are never read as one before the import
        plain = upload(client, model, alice, "early.onnx", pieces=2)
        response = client.post("/models", json={"upload": plain}, headers=alice)
        assert assert_problem(response, 422)["kind"] == "ExternalData"
        # a model that passes: the finishing PATCH is a 204 and the import goes on as ever
        good = create(client, len(add_model(57)), alice, part="model")
        assert patch(client, good, 0, add_model(57), alice).status_code == 204
        assert client.post("/models", json={"upload": good.rsplit("/", 1)[1]}, headers=alice).status_code == 201
        refused = client.post("/uploads", headers={**TUS, **alice, "Upload-Length": "8", "Upload-Metadata": metadata("m.onnx", "weights")})
        assert_problem(refused, 400)


def test_another_tenant_sees_nothing(server: AsgiService, alice: dict[str, str], bob: dict[str, str]) -> None:
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


def test_an_incomplete_upload_is_not_imported(server: AsgiService, alice: dict[str, str]) -> None:
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


def test_delete_removes_the_upload(server: AsgiService, alice: dict[str, str]) -> None:
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


def test_the_routes_are_documented(server: AsgiService) -> None:
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
    with serving_over_asgi(tmp_path / "store", SAMPLES, "--upload-expiry", "3") as server, server.client() as client:
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
    with serving_over_asgi(tmp_path / "store", SAMPLES, *args) as server, server.client() as client:
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
    auth = tenant_keys(tmp_path / "keys.toml", "alice", "bob")
    with serving_over_asgi(tmp_path / "store", SAMPLES, "--api-keys", str(tmp_path / "keys.toml")) as server, server.client() as client:
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
