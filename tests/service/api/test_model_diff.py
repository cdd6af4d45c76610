"""`GET /models/{a}/diff/{b}` and the client's `diff`, against the real
service (in the test process, its workers real).

Two versions of one small network, written with onnx's helper: the second
raises the opset, renames a dimension of the input and the output, changes
one node's op type, drops a node and its initializer, adds a node, changes
one initializer's bytes and keeps one identical; an unnamed node is in both.
The diff names exactly those changes, a model compared with itself is
identical, the pages join to the whole (as the async client and the `diff`
command join them), and a model the caller may not read is a 404 whichever
side it is on.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.in_process_service import InProcessService, serving_in_process
from support.paths import REPO
from support.service_harness import assert_problem, copy_samples

from service.access.keys import new_key
from service.client import AsyncClient, Client, ServiceError

ON_A_PORT = True  # the service on a loopback port, in the test process (support/servers.py): its command line runs as a subprocess

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)


def network(path: Path, *, opset: int, batch: str, activation: str, weight: float, scaled: bool) -> None:
    """X @ W + B, an activation, then a scaling Mul (`scaled`) or an Identity named
    "extra", then an unnamed Identity to Y."""
    tensors = [
        numpy_helper.from_array(np.full((4, 3), weight, np.float32), "W"),
        numpy_helper.from_array(np.zeros(3, np.float32), "B"),
    ]
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "B"], ["y0"], name="add"),
        helper.make_node(activation, ["y0"], ["y1"], name="act"),
    ]
    if scaled:
        tensors.append(numpy_helper.from_array(np.array([2.0], np.float32), "S"))
        nodes.append(helper.make_node("Mul", ["y1", "S"], ["y2"], name="scale"))
    else:
        nodes.append(helper.make_node("Identity", ["y1"], ["y2"], name="extra"))
    nodes.append(helper.make_node("Identity", ["y2"], ["Y"]))
    graph = helper.make_graph(
        nodes,
        "net",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [batch, 3])],
        tensors,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory, store_kind: str) -> Path:
    root = copy_samples(tmp_path_factory.mktemp("root") / "root")
    network(root / "before.onnx", opset=17, batch="N", activation="Relu", weight=1.0, scaled=True)
    network(root / "after.onnx", opset=18, batch="batch", activation="Sigmoid", weight=2.0, scaled=False)
    return root


@pytest.fixture()
def client(server: InProcessService) -> Iterator[Client]:
    with Client(server.url) as session:
        yield session


@pytest.fixture()
def pair(client: Client) -> tuple[str, str]:
    return client.import_path("before.onnx")["id"], client.import_path("after.onnx")["id"]


def test_the_diff_names_every_change_and_nothing_else(client: Client, pair: tuple[str, str]) -> None:
    before, after = pair
    diff = client.diff(before, after)
    assert diff["format"] == "onnx-service-diff/1" and not diff["identical"] and diff["tensor_bytes_compared"]
    assert diff["a"] == {"id": before, "node_count": 5, "initializer_count": 3}
    assert diff["b"] == {"id": after, "node_count": 5, "initializer_count": 2}
    assert diff["opsets"] == [{"domain": "", "change": "changed", "a": 17, "b": 18}]
    assert diff["domains"] == {"added": [], "removed": []}
    for side in ("inputs", "outputs"):
        (changed,) = diff[side]
        assert changed["change"] == "changed" and changed["a"]["shape"][0] == "N" and changed["b"]["shape"][0] == "batch"
    assert diff["op_types"] == [
        {"op_type": "Identity", "a": 1, "b": 2},
        {"op_type": "Mul", "a": 1, "b": 0},
        {"op_type": "Relu", "a": 1, "b": 0},
        {"op_type": "Sigmoid", "a": 0, "b": 1},
    ]
    nodes = {(c["change"], c["name"]): c for c in diff["changes"] if c["kind"] == "node"}
    assert set(nodes) == {("changed", "act"), ("removed", "scale"), ("added", "extra")}
    assert nodes["changed", "act"]["fields"] == ["op_type"] and nodes["changed", "act"]["op_type"] == "Sigmoid"
    assert (nodes["changed", "act"]["a_position"], nodes["changed", "act"]["b_position"]) == (2, 2)
    assert nodes["removed", "scale"]["a_position"] == 3 and nodes["added", "extra"]["b_position"] == 3
    tensors = {(c["change"], c["name"]): c for c in diff["changes"] if c["kind"] == "initializer"}
    assert set(tensors) == {("changed", "W"), ("removed", "S")}
    weight = tensors["changed", "W"]
    assert weight["fields"] == ["sha256"] and weight["a"]["dims"] == weight["b"]["dims"] == [4, 3]
    assert diff["counts"] == {"node": {"added": 1, "removed": 1, "changed": 1}, "initializer": {"added": 0, "removed": 1, "changed": 1}}
    reverse = client.diff(after, before)
    assert reverse["counts"] == {"node": {"added": 1, "removed": 1, "changed": 1}, "initializer": {"added": 1, "removed": 0, "changed": 1}}


def test_the_graph_documents_tensors_carry_the_sha256_of_their_bytes(client: Client, pair: tuple[str, str]) -> None:
    before, _ = pair
    graph = client.graph(before)
    assert graph["format"] == "onnx-service-graph/4"
    digests = {v["name"]: v["initializer"]["sha256"] for v in graph["graph"]["values"] if "initializer" in v}
    assert set(digests) == {"W", "B", "S"}
    for name, digest in digests.items():
        assert digest == hashlib.sha256(b"".join(client.tensor_bytes(before, name))).hexdigest(), name


def test_a_model_compared_with_itself_is_identical(client: Client, pair: tuple[str, str]) -> None:
    before, _ = pair
    diff = client.diff(before, before)
    assert diff["identical"] and diff["changes"] == [] and diff["op_types"] == diff["inputs"] == diff["opsets"] == []


def test_the_pages_join_to_the_whole(client: Client, server: InProcessService, pair: tuple[str, str]) -> None:
    before, after = pair
    whole = client.diff(before, after)["changes"]
    pages, url = [], f"{server.url}/models/{before}/diff/{after}?limit=2"
    while url:
        page = httpx.get(url, timeout=30).json()
        assert len(page["changes"]) <= 2
        pages.extend(page["changes"])
        url = server.url + page["links"]["next"] if page["links"]["next"] else ""
    assert pages == whole and len(whole) == 5
    assert_problem(httpx.get(f"{server.url}/models/{before}/diff/{after}?cursor=bm90LWEtY3Vyc29y", timeout=30), 400, "bad-request")


def test_the_async_client_and_the_command_give_the_same_diff(client: Client, server: InProcessService, pair: tuple[str, str]) -> None:
    whole = client.diff(*pair)

    async def fetched() -> object:
        async with AsyncClient(server.url) as session:
            return await session.diff(*pair, page_size=2)

    assert asyncio.run(fetched()) == whole
    command = [sys.executable, "-m", "service.client", "--url", server.url, "diff", *pair]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout) == whole, done.stderr


def test_a_missing_model_on_either_side_is_a_404(client: Client, pair: tuple[str, str]) -> None:
    before, _ = pair
    for a, b in ((before, "0" * 64), ("0" * 64, before)):
        with pytest.raises(ServiceError) as missing:
            client.diff(a, b)
        assert missing.value.status == 404 and "0" * 16 in str(missing.value)


def test_another_tenants_model_is_a_404(tmp_path: Path, data_root: Path) -> None:
    first_secret, first = new_key("team-a", ["import", "read"])
    second_secret, second = new_key("team-b", ["import", "read"])
    keys = tmp_path / "keys.toml"
    keys.write_text(first + "\n" + second)
    keyed = serving_in_process(tmp_path / "store", data_root, "--api-keys", str(keys))
    with keyed as service, Client(service.url, token=first_secret) as team_a:
        with Client(service.url, token=second_secret) as team_b:
            own = team_a.import_path("before.onnx")["id"]
            other = team_b.import_path("after.onnx")["id"]
            assert team_b.diff(other, other)["identical"]
        for a, b in ((own, other), (other, own)):
            with pytest.raises(ServiceError) as hidden:
                team_a.diff(a, b)
            assert hidden.value.status == 404
