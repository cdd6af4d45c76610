"""The catalogue API against the real service (in the test process, its
workers real): tensors by their ONNX names (any
characters, the empty name, names shared across subgraphs and functions),
`field_path` addressing, aliases, pagination of tensors and models, DELETE,
HEAD on every GET route, bounded summaries, and every JSON body validated
against its pydantic response model."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from pydantic import BaseModel
from support.in_process_service import InProcessService
from support.service_harness import SAMPLES, assert_problem, copy_samples, reference_sha256

from service.api.schemas import GraphDocument, Health, ModelPage, ModelSummary, Problem, Readiness, TensorPage

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)


ODD_NAMES = ["a/b", "onnx::Split_138", "/model.10/Constant_output_0", "100%", "what?", "#hash", "with space", "été/Δ", "a_b", ".", ".."]
OPSET = [helper.make_opsetid("", 21), helper.make_opsetid("local", 1)]


def _save(model: onnx.ModelProto, path: Path) -> Path:
    model.ir_version = 10
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def odd_names_model(path: Path) -> Path:
    """An initializer for each odd name (value = its index), and one unnamed
    Constant tensor (the empty name)."""
    initializers = [numpy_helper.from_array(np.full([2], index, dtype=np.float32), name) for index, name in enumerate(ODD_NAMES)]
    unnamed = helper.make_tensor("", TensorProto.FLOAT, [1], [42.0])
    nodes = [helper.make_node("Constant", [], ["k"], value=unnamed), helper.make_node("Add", [ODD_NAMES[0], "k"], ["y"])]
    graph = helper.make_graph(nodes, "odd", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], initializers)
    return _save(helper.make_model(graph, opset_imports=OPSET[:1]), path)


def shared_names_model(path: Path) -> Path:
    """The name "w" held by an initializer, a Constant inside an If branch,
    and a Constant inside a function."""

    def constant(value: float) -> onnx.NodeProto:
        return helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.full([2], value, dtype=np.float32), "w"))

    def branch(name: str, value: float) -> onnx.GraphProto:
        return helper.make_graph(
            [constant(value), helper.make_node("Add", ["c", "w"], [f"{name}_y"])],
            name,
            [],
            [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [2])],
        )

    function = helper.make_function(
        "local", "AddW", ["x"], ["y"], [constant(3.0), helper.make_node("Add", ["x", "c"], ["y"])], opset_imports=OPSET[:1]
    )
    nodes = [
        helper.make_node("If", ["cond"], ["z"], then_branch=branch("then", 1.0), else_branch=branch("else", 2.0)),
        helper.make_node("AddW", ["z"], ["out"], domain="local"),
    ]
    graph = helper.make_graph(
        nodes,
        "shared",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.zeros([2], dtype=np.float32), "w")],
    )
    return _save(helper.make_model(graph, opset_imports=OPSET, functions=[function]), path)


def many_tensors_model(path: Path, count: int) -> Path:
    initializers = [numpy_helper.from_array(np.array([index], dtype=np.int64), f"layer{index % 7}/w{index}") for index in range(count)]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "many",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        initializers,
    )
    return _save(helper.make_model(graph, opset_imports=OPSET[:1]), path)


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under `root` (links not followed) with its content's hash."""
    digests = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            digests[str(path.relative_to(root))] = "link" if path.is_symlink() else hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory, store_kind: str) -> Path:
    root = copy_samples(tmp_path_factory.mktemp("catalog-data") / "root")
    odd_names_model(root / "odd.onnx")
    shared_names_model(root / "shared.onnx")
    many_tensors_model(root / "many.onnx", 250)
    many_tensors_model(root / "wide.onnx", 3)
    return root


def valid(model: type[BaseModel], response: httpx.Response) -> Any:
    """The body, after checking it against the route's response model."""
    assert response.headers["content-type"].split(";")[0] in ("application/json", "application/problem+json"), response.headers
    model.model_validate_json(response.content, strict=False)
    return response.json()


def imported(client: httpx.Client, path: str) -> dict[str, Any]:
    response = client.post("/models", json={"path": path})
    assert response.status_code in (200, 201), response.text
    summary: dict[str, Any] = valid(ModelSummary, response)
    return summary


def all_tensors(client: httpx.Client, model_id: str, limit: int, prefix: str = "") -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    url: str | None = f"/models/{model_id}/tensors?limit={limit}" + (f"&prefix={quote(prefix, safe='')}" if prefix else "")
    while url is not None:
        page = valid(TensorPage, client.get(url))
        assert len(page["items"]) <= limit
        items += page["items"]
        url = page["links"]["next"]
        assert (url is None) == (page["next_cursor"] is None)
    return items


def test_tensors_by_their_real_names(client: httpx.Client, data_root: Path) -> None:
    summary = imported(client, "odd.onnx")
    model_id = summary["id"]
    for index, name in enumerate(ODD_NAMES):
        encoded = quote(name, safe="").replace(".", "%2E") if name in (".", "..") else quote(name, safe="")
        response = client.get(f"/models/{model_id}/tensors/{encoded}")
        assert response.status_code == 200, (name, response.text)
        assert np.frombuffer(response.content, np.float32).tolist() == [index, index], name
    hrefs = {t["name"]: t["href"] for t in summary["tensors"]}
    for index, name in enumerate(ODD_NAMES):
        assert hrefs[name].startswith(f"/models/{model_id}/tensors/") and "?" not in hrefs[name]
        fetched = client.get(hrefs[name])
        assert np.frombuffer(fetched.content, np.float32).tolist() == [index, index]
        field_path = f"ModelProto.graph.initializer[{index}]"
        assert hashlib.sha256(fetched.content).hexdigest() == reference_sha256(data_root / "odd.onnx", field_path)
    # the empty name: the unnamed Constant tensor, at /tensors/
    empty = client.get(f"/models/{model_id}/tensors/")
    assert empty.status_code == 200 and np.frombuffer(empty.content, np.float32).tolist() == [42.0]
    assert hrefs[""] == f"/models/{model_id}/tensors/"
    # "%" arrives decoded once: %2525 is the name "%25", which no tensor has
    assert_problem(client.get(f"/models/{model_id}/tensors/100%2525"), 404, "not-found")
    # the URL-safe aliases keep working; a real name wins over another tensor's alias
    aliases = {t["name"]: t["alias"] for t in summary["tensors"]}
    assert aliases["a/b"] == "a_b" and aliases["a_b"] == "a_b~2" and aliases[""] == "Constant.value"
    assert np.frombuffer(client.get(f"/models/{model_id}/tensors/a_b").content, np.float32)[0] == ODD_NAMES.index("a_b")
    assert np.frombuffer(client.get(f"/models/{model_id}/tensors/a_b~2").content, np.float32)[0] == ODD_NAMES.index("a_b")
    assert np.frombuffer(client.get(f"/models/{model_id}/tensors/Constant.value").content, np.float32)[0] == 42.0


def test_a_shared_name_answers_409_with_candidates_and_field_path_picks_one(client: httpx.Client, data_root: Path) -> None:
    summary = imported(client, "shared.onnx")
    model_id = summary["id"]
    conflict = client.get(f"/models/{model_id}/tensors/w")
    body = assert_problem(conflict, 409, "ambiguous-tensor-name")
    valid(Problem, conflict)
    paths = [c["field_path"] for c in body["candidates"]]
    assert body["candidate_count"] == 4 == len(paths)
    assert paths[0] == "ModelProto.graph.initializer[0]"
    assert any(".g.node[0]" in p for p in paths) and any(p.startswith("ModelProto.functions[0]") for p in paths)
    expected = {p: reference_sha256(data_root / "shared.onnx", p) for p in paths}
    for candidate in body["candidates"]:
        assert "?field_path=" in candidate["href"]
        response = client.get(candidate["href"])
        assert response.status_code == 200, response.text
        assert hashlib.sha256(response.content).hexdigest() == expected[candidate["field_path"]]
    # field_path addresses exactly; with a name that is not the tensor's, 404
    path = paths[-1]
    exact = client.get(f"/models/{model_id}/tensors/w", params={"field_path": path})
    assert np.frombuffer(exact.content, np.float32).tolist() == [3.0, 3.0]
    assert_problem(client.get(f"/models/{model_id}/tensors/v", params={"field_path": path}), 404, "not-found")
    assert_problem(client.get(f"/models/{model_id}/tensors/w", params={"field_path": "ModelProto.graph.node[9]"}), 404)
    # every href of the summary works, and the listing agrees with it
    listed = all_tensors(client, model_id, 2)
    assert [t["href"] for t in listed] == [t["href"] for t in summary["tensors"]]
    assert {t["alias"] for t in listed} == {"w", "w~2", "w~3", "w~4"}


def test_tensor_pages_reach_the_end_once_each(client: httpx.Client) -> None:
    summary = imported(client, "many.onnx")
    model_id = summary["id"]
    assert summary["counts"]["tensors"] == summary["counts"]["initializers"] == 250
    assert len(summary["tensors"]) == len(summary["graph"]["initializers"]) == 100
    assert {"tensors", "initializers"} <= set(summary["truncated"])
    for limit in (7, 100, 1000):
        items = all_tensors(client, model_id, limit)
        paths = [t["field_path"] for t in items]
        assert paths == [f"ModelProto.graph.initializer[{i}]" for i in range(250)]
    layer3 = all_tensors(client, model_id, 9, prefix="layer3/")
    assert [t["name"] for t in layer3] == [f"layer3/w{i}" for i in range(250) if i % 7 == 3]
    assert all_tensors(client, model_id, 5, prefix="nothing") == []
    assert_problem(client.get(f"/models/{model_id}/tensors", params={"cursor": "garbage!"}), 400, "bad-request")
    models_cursor = client.get("/models", params={"limit": 1}).json()["next_cursor"]
    assert_problem(client.get(f"/models/{model_id}/tensors", params={"cursor": models_cursor}), 400, "bad-request")
    assert_problem(client.get(f"/models/{model_id}/tensors", params={"limit": 0}), 422, "validation-error")
    assert len(client.get(f"/models/{model_id}").content) < 2_000_000


def test_model_pages_newest_first(client: httpx.Client) -> None:
    ids = [imported(client, path)["id"] for path in ("add.onnx", "typed_fields.onnx", "wide.onnx", "if_subgraph.onnx")]
    seen: list[dict[str, Any]] = []
    url: str | None = "/models?limit=2"
    while url is not None:
        page = valid(ModelPage, client.get(url))
        seen += page["items"]
        url = page["links"]["next"]
    listed = [item["id"] for item in seen]
    assert len(listed) == len(set(listed))
    assert set(ids) <= set(listed)
    created = [item["created"] for item in seen]
    assert created == sorted(created, reverse=True)
    newest = {item["id"]: item for item in seen}[ids[-1]]
    assert newest["input"] == "if_subgraph.onnx" and newest["href"] == f"/models/{ids[-1]}"


def test_delete_removes_the_record_and_never_the_data_root(server: InProcessService, client: httpx.Client, data_root: Path) -> None:
    before = tree_digest(data_root)
    by_path = imported(client, "external/model.onnx")["id"]
    model = onnx.load(str(SAMPLES / "add.onnx"))
    model.doc_string = "uploaded for deletion"  # other bytes than the sample: stored from the upload
    uploaded = client.post("/models", files={"model": ("gone.onnx", model.SerializeToString())}).json()["id"]
    for model_id in (by_path, uploaded):
        assert client.delete(f"/models/{model_id}").status_code == 204
        assert_problem(client.get(f"/models/{model_id}"), 404, "not-found")
        assert_problem(client.get(f"/models/{model_id}/tensors/W"), 404, "not-found")
        assert_problem(client.get(f"/models/{model_id}/graph"), 404, "not-found")
        assert_problem(client.delete(f"/models/{model_id}"), 404, "not-found")
        assert not server.content_stored(model_id)
        assert model_id not in {item["id"] for item in client.get("/models", params={"limit": 1000}).json()["items"]}
    assert tree_digest(data_root) == before
    again = client.post("/models", json={"path": "external/model.onnx"})
    assert again.status_code == 201 and again.json()["id"] == by_path
    assert server.temporary_files() == []


def test_head_on_every_get_route(client: httpx.Client) -> None:
    summary = imported(client, "add.onnx")
    model_id = summary["id"]
    urls = [
        "/healthz",
        "/readyz",
        "/openapi.json",
        "/docs",
        "/models",
        f"/models/{model_id}",
        f"/models/{model_id}/graph",
        f"/models/{model_id}/tensors",
        f"/models/{model_id}/tensors/W",
        f"/models/{model_id}/tensors/W?format=npy",
        f"/models/{'0' * 64}",
        f"/models/{model_id}/tensors/missing",
    ]
    for url in urls:
        got = client.get(url)
        head = client.head(url)
        assert head.status_code == got.status_code, url
        assert head.content == b"", url
        assert head.headers.get("content-type") == got.headers.get("content-type"), url
        if url.endswith(("/W", "npy")):
            assert head.headers["content-length"] == got.headers["content-length"] == str(len(got.content))
            assert head.headers["etag"] == got.headers["etag"]


def test_every_json_body_matches_its_model(client: httpx.Client) -> None:
    valid(Health, client.get("/healthz"))
    valid(Readiness, client.get("/readyz"))
    for path in ("add.onnx", "typed_fields.onnx", "if_subgraph.onnx", "external/model.onnx", "odd.onnx", "shared.onnx"):
        summary = imported(client, path)
        valid(ModelSummary, client.get(f"/models/{summary['id']}"))
        valid(GraphDocument, client.get(f"/models/{summary['id']}/graph"))
        valid(TensorPage, client.get(f"/models/{summary['id']}/tensors"))
    valid(ModelPage, client.get("/models"))
    valid(Problem, client.get("/models/nope"))


def test_sixty_thousand_tensors_import_and_every_one_is_reachable_by_name(client: httpx.Client) -> None:
    """Big enough that SQLite's index sort would spill to a temporary file,
    which the worker (RLIMIT_FSIZE 0) must never write."""
    names = [f"/model.{i % 97}/Constant_{i}_output_0" for i in range(60_000)]
    raw = [np.array([i], dtype=np.int32).tobytes() for i in range(60_000)]
    initializers = [helper.make_tensor(name, TensorProto.INT32, [1], data, raw=True) for name, data in zip(names, raw, strict=True)]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "sixty",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=OPSET[:1])
    response = client.post("/models", files={"model": ("sixty.onnx", model.SerializeToString())})
    assert response.status_code == 201, response.text
    summary = valid(ModelSummary, response)
    assert summary["counts"]["tensors"] == 60_000 and len(response.content) < 2_000_000
    for index in (0, 1, 30_001, 59_999):
        got = client.get(f"/models/{summary['id']}/tensors/{quote(names[index], safe='')}")
        assert got.status_code == 200 and np.frombuffer(got.content, np.int32).tolist() == [index]
