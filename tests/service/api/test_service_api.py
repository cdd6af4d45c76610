"""The service over HTTP (in the test process, its workers real: see
support.in_process_service): imports by path and by upload, the summary and
graph, tensor bytes against the onnx reference, Range, .npy, ids, problems and
the OpenAPI document."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from support.in_process_service import InProcessService
from support.service_harness import (
    SAMPLES,
    assert_problem,
    copy_samples,
    model_id_of,
    onnx_tensor_at,
    reference_sha256,
)

import importer

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory, store_kind: str) -> Path:
    """The samples, plus what the traversal tests need: links in and out,
    a directory, a FIFO, and a secret outside the root."""
    base = tmp_path_factory.mktemp("service-data")
    root = copy_samples(base / "root")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.onnx").write_bytes((SAMPLES / "add.onnx").read_bytes())
    (outside / "weights.bin").write_bytes((SAMPLES / "external" / "weights.bin").read_bytes())
    os.symlink(outside / "secret.onnx", root / "link_out.onnx")
    os.symlink("../outside/secret.onnx", root / "relative_link_out.onnx")
    os.symlink(outside, root / "dir_link_out")
    os.symlink("add.onnx", root / "link_in.onnx")
    (root / "a_folder.onnx").mkdir()
    os.mkfifo(root / "fifo.onnx")
    # a model whose external data file is a link out of the root
    escape = root / "escape"
    escape.mkdir()
    (escape / "model.onnx").write_bytes((SAMPLES / "external" / "model.onnx").read_bytes())
    os.symlink(outside / "weights.bin", escape / "weights.bin")
    (escape / "more").mkdir()
    (escape / "more" / "bias.bin").write_bytes((SAMPLES / "external" / "more" / "bias.bin").read_bytes())
    return root


SAMPLE_PATHS = ["add.onnx", "typed_fields.onnx", "if_subgraph.onnx", "external/model.onnx"]
EXTERNAL_FILES = {"weights.bin": SAMPLES / "external" / "weights.bin", "more/bias.bin": SAMPLES / "external" / "more" / "bias.bin"}


def post_path(client: httpx.Client, path: str) -> httpx.Response:
    return client.post("/models", json={"path": path})


def upload(client: httpx.Client, model: bytes, externals: dict[str, bytes] | None = None, filename: str = "model.onnx") -> httpx.Response:
    files: list[tuple[str, tuple[str, bytes, str]]] = [("model", (filename, model, "application/octet-stream"))]
    for location, data in (externals or {}).items():
        files.append(("external_data", (location, data, "application/octet-stream")))
    return client.post("/models", files=files)


def with_query(href: str, query: str) -> str:
    """`href` (which may hold ?field_path=) with one more query parameter."""
    return href + ("&" if "?" in href else "?") + query


def expected_id(path: str) -> str:
    model = (SAMPLES / path).read_bytes()
    externals = {k: v.read_bytes() for k, v in EXTERNAL_FILES.items()} if path.startswith("external/") else {}
    return model_id_of(model, externals, "path")


def test_health_and_readiness(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "importer_build": importer.BUILD}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["fork_server"] and ready["store_writable"]
    assert ready["network_isolation"] in ("namespace", "user-namespace", "unavailable")


@pytest.mark.parametrize("path", SAMPLE_PATHS)
def test_import_by_path_then_again(client: httpx.Client, path: str) -> None:
    first = post_path(client, path)
    assert first.status_code in (200, 201), first.text
    summary = first.json()
    assert summary["id"] == expected_id(path)
    assert first.headers["location"] == f"/models/{summary['id']}"
    model_bytes = (SAMPLES / path).read_bytes()
    assert summary["model_file"] == {"size": len(model_bytes), "sha256": hashlib.sha256(model_bytes).hexdigest()}
    assert summary["input"] == path
    assert summary["ir_version"] == 10 and summary["producer"]["name"] == "tools/make_samples.py"
    assert summary["opsets"] == [{"domain": "", "version": 21}]
    again = post_path(client, path)
    assert again.status_code == 200 and again.json()["id"] == summary["id"]
    assert client.get(f"/models/{summary['id']}").json() == again.json()


def test_same_upload_twice_gives_201_then_200_and_the_same_id(client: httpx.Client) -> None:
    model = (SAMPLES / "add.onnx").read_bytes()
    variant = _add_variant(12345)
    first = upload(client, variant)
    second = upload(client, variant)
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"] == model_id_of(variant, {})
    # the same bytes as a server-side sample are stored apart from the path import (and served from the store)
    uploaded = upload(client, model, filename="mine.onnx")
    assert uploaded.json()["id"] == model_id_of(model, {}) != expected_id("add.onnx")
    assert uploaded.json()["input"] == "mine.onnx"


def test_summary_contents(client: httpx.Client) -> None:
    summary = post_path(client, "typed_fields.onnx").json()
    graph = summary["graph"]
    assert graph["node_count"] == 1 and graph["op_types"] == {"Identity": 1}
    assert graph["inputs"] == [{"name": "X", "type": {"kind": "tensor", "elem_type": "FLOAT", "shape": ["N"]}}]
    assert [i["name"] for i in graph["initializers"]] == ["f32", "i32", "i16", "i64", "f64", "flags", "half", "words"]
    assert graph["initializers"][1]["location"] == {"source": "int32_data"}
    assert graph["initializers"][1]["href"] == f"/models/{summary['id']}/tensors/i32"
    sparse = graph["sparse_initializers"][0]
    assert sparse["values"]["field_path"] == "ModelProto.graph.sparse_initializer[0].values"
    assert sparse["values"]["href"] == f"/models/{summary['id']}/tensors/sparse"
    assert sparse["indices"]["href"] == f"/models/{summary['id']}/tensors/sparse_indices"
    assert graph["nodes_were_reordered"] is False and graph["subgraph_count"] == 0
    assert summary["counts"]["tensors"] == len(summary["tensors"]) == 10 and summary["truncated"] == []
    aliases = [t["alias"] for t in summary["tensors"]]
    assert len(aliases) == len(set(aliases)) == 10
    external = post_path(client, "external/model.onnx").json()
    w = external["graph"]["initializers"][0]
    assert w["location"] == {"source": "external", "file": "weights.bin", "offset": 16, "length": 64 * 32 * 4}
    subgraphs = post_path(client, "if_subgraph.onnx").json()
    assert subgraphs["graph"]["subgraph_count"] == 2
    assert [t["name"] for t in subgraphs["tensors"]] == ["offset", "k", "k"]
    assert [t["alias"] for t in subgraphs["tensors"]] == ["offset", "k", "k~2"]


def test_graph_document(client: httpx.Client) -> None:
    model_id = post_path(client, "if_subgraph.onnx").json()["id"]
    document = client.get(f"/models/{model_id}/graph").json()
    graph = document["graph"]
    (node,) = graph["nodes"]
    assert node["op_type"] == "If" and node["opset_version"] == 21
    then_branch = next(a for a in node["attributes"] if a["name"] == "then_branch")["value"]
    assert then_branch["captures"] == ["offset"]
    assert [n["op_type"] for n in then_branch["nodes"]] == ["Constant", "Add"]
    constant = then_branch["nodes"][0]["attributes"][0]["value"]
    assert constant["name"] == "k" and constant["dims"] == [3]
    assert constant["field_path"] == "ModelProto.graph.node[0].attribute[1].g.node[0].attribute[0].t"  # else_branch is attribute[0]
    assert constant["href"] == f"/models/{model_id}/tensors/k?field_path=" + constant["field_path"].replace("[", "%5B").replace("]", "%5D")
    assert np.frombuffer(client.get(constant["href"]).content, np.float32).tolist() == [1.0, 1.0, 1.0]
    offset = next(v for v in graph["values"] if v["name"] == "offset")
    assert offset["consumers"] == [0] and offset["initializer"]["href"] == f"/models/{model_id}/tensors/offset"
    add = client.get(f"/models/{post_path(client, 'add.onnx').json()['id']}/graph").json()["graph"]
    assert [n["op_type"] for n in add["nodes"]] == ["Constant", "Add", "Mul"]
    assert add["nodes"][1]["inputs"] == ["X", "W"]


def _check_all_tensors(client: httpx.Client, summary: dict[str, Any], model_path: Path) -> int:
    checked = 0
    for tensor in summary["tensors"]:
        response = client.get(tensor["href"])
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/octet-stream"
        assert int(response.headers["content-length"]) == len(response.content)
        assert response.headers["x-tensor-element-type"] == tensor["elem_type"]
        assert response.headers["x-tensor-dims"] == str(tensor["dims"]).replace(" ", "")
        assert hashlib.sha256(response.content).hexdigest() == reference_sha256(model_path, tensor["field_path"]), tensor
        checked += 1
    return checked


@pytest.mark.parametrize("path", SAMPLE_PATHS)
def test_tensor_bytes_equal_the_reference_by_path(client: httpx.Client, path: str) -> None:
    summary = post_path(client, path).json()
    sources = {t["source"] for t in summary["tensors"]}
    assert _check_all_tensors(client, summary, SAMPLES / path) == len(summary["tensors"]) > 0
    assert sources <= {"raw_data", "external", "float_data", "int32_data", "int64_data", "double_data", "string_data"}


def test_upload_with_external_data(server: InProcessService, client: httpx.Client) -> None:
    model = (SAMPLES / "external" / "model.onnx").read_bytes()
    externals = {k: v.read_bytes() for k, v in EXTERNAL_FILES.items()}
    weights = bytearray(externals["weights.bin"])
    weights[100] ^= 0xFF  # different content from the sample: a new id, imported from the upload
    externals["weights.bin"] = bytes(weights)
    response = upload(client, model, externals, filename="uploaded.onnx")
    assert response.status_code == 201, response.text
    summary = response.json()
    assert summary["id"] == model_id_of(model, externals) and summary["input"] == "uploaded.onnx"
    w = client.get(f"/models/{summary['id']}/tensors/W").content
    assert w == bytes(weights[16:])
    b = client.get(f"/models/{summary['id']}/tensors/B").content
    assert b == externals["more/bias.bin"]
    assert server.temporary_files() == []


def test_upload_without_its_external_data_is_an_external_data_problem(client: httpx.Client) -> None:
    model = (SAMPLES / "external" / "model.onnx").read_bytes()
    body = assert_problem(upload(client, model, {"weights.bin": EXTERNAL_FILES["weights.bin"].read_bytes()}), 422, "external-data")
    assert body["kind"] == "ExternalData" and "bias.bin" in body["detail"]
    assert body["field_path"] == "ModelProto.graph.initializer[1]" and isinstance(body["offset"], int)


def test_malformed_upload_is_a_typed_problem(server: InProcessService, client: httpx.Client) -> None:
    body = assert_problem(upload(client, b"\x0a\xff\xff\xff\xff\xff", filename="broken.onnx"), 422, "malformed")
    assert body["kind"] == "Malformed" and body["input"] == "broken.onnx"
    assert "offset" in body and "field_path" in body
    assert "\\xff" not in body["detail"]
    assert server.temporary_files() == []


def test_range_requests(client: httpx.Client) -> None:
    model_id = post_path(client, "external/model.onnx").json()["id"]
    url = f"/models/{model_id}/tensors/W"
    whole = client.get(url)
    etag = whole.headers["etag"]
    part = client.get(url, headers={"Range": "bytes=10-99"})
    assert part.status_code == 206 and part.content == whole.content[10:100]
    assert part.headers["content-range"] == f"bytes 10-99/{len(whole.content)}"
    assert part.headers["content-length"] == "90"
    assert client.get(url, headers={"Range": "bytes=-5"}).content == whole.content[-5:]
    assert client.get(url, headers={"Range": "bytes=8000-"}).content == whole.content[8000:]
    assert client.get(url, headers={"Range": "bytes=0-1,5-6"}).status_code == 200  # several ranges: the whole
    unsatisfiable = assert_problem(client.get(url, headers={"Range": f"bytes={len(whole.content)}-"}), 416, "range-not-satisfiable")
    assert unsatisfiable["status"] == 416
    assert client.get(url, headers={"If-None-Match": etag}).status_code == 304
    assert client.get(url, headers={"Range": "bytes=0-3", "If-Range": '"other"'}).status_code == 200


def test_npy_equals_numpy_helper(client: httpx.Client) -> None:
    import onnx
    from onnx import numpy_helper

    checked = 0
    for path in SAMPLE_PATHS:
        summary = post_path(client, path).json()
        reference = onnx.load(str(SAMPLES / path))
        for tensor in summary["tensors"]:
            response = client.get(with_query(tensor["href"], "format=npy"))
            if tensor["elem_type"] == "STRING":
                assert_problem(response, 415, "unsupported-media-type")
                continue
            assert response.status_code == 200, response.text
            array = np.load(io.BytesIO(response.content), allow_pickle=False)
            expected = numpy_helper.to_array(onnx_tensor_at(reference, tensor["field_path"]))
            assert array.dtype == expected.dtype and array.shape == expected.shape
            assert np.array_equal(array, expected)
            checked += 1
    assert checked >= 14
    part = client.get(with_query(summary["tensors"][0]["href"], "format=npy"), headers={"Range": "bytes=0-5"})
    assert part.status_code == 206 and part.content == b"\x93NUMPY"


def test_unknown_models_and_tensors(client: httpx.Client) -> None:
    assert_problem(client.get("/models/" + "0" * 64), 404, "not-found")
    assert_problem(client.get("/models/not-an-id/graph"), 404, "not-found")
    model_id = post_path(client, "add.onnx").json()["id"]
    assert_problem(client.get(f"/models/{model_id}/tensors/nope"), 404, "not-found")
    assert_problem(client.get(f"/models/{model_id}/tensors/..%2F..%2Fetc%2Fpasswd"), 404)
    assert_problem(client.get(f"/models/{model_id}/tensors/W", params={"format": "csv"}), 422, "validation-error")


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/etc/passwd", 400),
        ("../outside/secret.onnx", 400),
        ("external/../../outside/secret.onnx", 400),
        ("..\\outside\\secret.onnx", 400),
        ("C:/models/x.onnx", 400),
        ("add.onnx\0.txt", 400),
        ("", 400),
        ("%2e%2e/outside/secret.onnx", 400),
        ("%2E%2E%2Foutside%2Fsecret.onnx", 400),
        ("%252e%252e/outside/secret.onnx", 400),
        ("%2fetc%2fpasswd", 400),
        ("add.onnx%00", 400),
        ("link_out.onnx", 403),
        ("relative_link_out.onnx", 403),
        ("dir_link_out/secret.onnx", 403),
        ("a_folder.onnx", 403),
        ("fifo.onnx", 403),
        (".", 403),
        ("missing.onnx", 404),
        ("external/missing.onnx", 404),
    ],
)
def test_server_side_paths_are_confined(server: InProcessService, client: httpx.Client, path: str, status: int) -> None:
    body = assert_problem(post_path(client, path), status)
    assert "\0" not in body["detail"]
    assert server.temporary_files() == []


def test_links_inside_the_root_are_followed(client: httpx.Client) -> None:
    response = post_path(client, "link_in.onnx")
    assert response.status_code in (200, 201) and response.json()["id"] == expected_id("add.onnx")


def test_external_data_linked_out_of_the_root_is_refused(client: httpx.Client) -> None:
    body = assert_problem(post_path(client, "escape/model.onnx"), 422, "external-data")
    assert body["kind"] == "ExternalData" and "weights.bin" in body["detail"]


@pytest.mark.parametrize(
    "location",
    ["../weights.bin", "/tmp/weights.bin", "sub/../../weights.bin", "..\\weights.bin", "%2e%2e/weights.bin", "C:weights.bin", "."],
)
def test_upload_locations_are_confined(server: InProcessService, client: httpx.Client, location: str) -> None:
    model = (SAMPLES / "add.onnx").read_bytes()
    assert_problem(upload(client, model, {location: b"x"}), 400, "path-refused")
    assert server.temporary_files() == []


def test_bad_requests_are_problems(client: httpx.Client) -> None:
    assert_problem(client.get("/nowhere"), 404, "not-found")
    response = assert_problem(client.delete("/models"), 405, "method-not-allowed")
    assert response["instance"] == "/models"
    assert_problem(client.put("/healthz"), 405)
    assert_problem(client.post("/models", content=b"x", headers={"content-type": "text/plain"}), 415, "unsupported-media-type")
    validation = assert_problem(client.post("/models", json={"pat": "x"}), 422, "validation-error")
    assert validation["errors"]
    assert_problem(client.post("/models", content=b"{not json", headers={"content-type": "application/json"}), 422, "validation-error")
    assert_problem(client.post("/models", json={"path": 5}), 422, "validation-error")
    assert_problem(client.post("/models", files={"other": ("x", b"1")}), 400, "bad-request")
    assert_problem(client.post("/models", files={"external_data": ("a.bin", b"1")}), 400, "bad-request")
    body = b'--b\r\nContent-Disposition: form-data; name="model"; filename="m"\r\n\r\nabc'  # cut off inside a part
    assert_problem(client.post("/models", content=body, headers={"content-type": "multipart/form-data; boundary=b"}), 400, "bad-request")
    # The service knows no test header (support/faults.py is test code): an empty model is refused as any other.
    assert_problem(client.post("/models", files={"model": ("m.onnx", b"")}, headers={"x-test-worker-sleep": "1"}), 422, "invalid-model")


def test_openapi_documents_every_route_and_response(client: httpx.Client) -> None:
    document = client.get("/openapi.json").json()
    paths = document["paths"]
    expected = {
        ("/models", "post"): {"200", "201", "400", "403", "404", "413", "415", "422", "500", "503", "507"},
        ("/models/{model_id}", "get"): {"200", "404"},
        ("/models/{model_id}/graph", "get"): {"200", "404"},
        ("/models/{model_id}/checks", "post"): {"200", "400", "404", "409", "503"},
        ("/models/{model_id}/attestation", "get"): {"200", "404"},
        ("/models/{model_id}/tensors/{name}", "get"): {"200", "206", "304", "404", "409", "410", "415", "416", "422"},
        ("/models/{model_id}/tensors", "get"): {"200", "400", "404", "422"},
        ("/models", "get"): {"200", "400", "422"},
        ("/models/{model_id}", "delete"): {"204", "404"},
        ("/links/{token}", "get"): {"200", "403", "404", "503"},
        ("/healthz", "get"): {"200"},
        ("/readyz", "get"): {"200", "503"},
    }
    for (path, method), statuses in expected.items():
        responses = paths[path][method]["responses"]
        assert statuses <= set(responses), (path, set(responses))
        assert "default" in responses or path == "/healthz"
        for status, response in responses.items():
            if status == "default" or status[0] in "45":
                assert "application/problem+json" in response["content"], (path, status)
    schemas = document["components"]["schemas"]
    assert {"Problem", "ModelSummary", "GraphDocument", "Readiness", "Health", "TensorPage", "ModelPage"} <= set(schemas)
    assert {"multipart/form-data", "application/json"} <= set(paths["/models"]["post"]["requestBody"]["content"])
    assert client.get("/docs").status_code == 200


def _add_variant(seed: int) -> bytes:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(SAMPLES / "add.onnx"))
    values = np.arange(6, dtype=np.float32).reshape(2, 3) + seed
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(values, name="W"))
    data: bytes = model.SerializeToString()
    return data


def test_fifty_concurrent_uploads(server: InProcessService) -> None:
    import concurrent.futures

    seeds = [1000 + i % 40 for i in range(50)]  # 40 distinct models, 10 of them posted twice
    variants = [_add_variant(seed) for seed in seeds]

    def post(model: bytes) -> tuple[int, str, bytes]:
        with server.client() as session:
            response = upload(session, model)
            assert response.status_code in (200, 201), response.text
            w = session.get(f"/models/{response.json()['id']}/tensors/W").content
            return response.status_code, response.json()["id"], w

    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        results = list(pool.map(post, variants))
    for seed, model, (_, model_id, w) in zip(seeds, variants, results, strict=True):
        assert model_id == model_id_of(model, {})
        assert w == (np.arange(6, dtype=np.float32) + seed).tobytes()
    created = sum(1 for status, _, _ in results if status == 201)
    assert created == 40
    assert server.temporary_files() == []
