"""The models and tensors the tests of tensor responses fetch (a plugin of tests/conftest.py).

`write_model(path, tensor, location)` writes y = Identity(Big), Big inline or
in external data; `values(seed, count)` are its float32 values;
`import_path(client, path)` imports a data-root path; `imported_w(server)`
is tensor W of add.onnx as a server first answers it (`Tensor`: its URL,
ETag and bytes); `names_model(path)` writes names.onnx, whose tensor names
(`NAMES`) are hard to spell in a URL. The fixtures
`big_reference` (Big as onnx reads big/model.onnx of the module's
`data_root`), `big_uploaded` and `big_by_path` (that model uploaded, and
imported by path, on the module's `server`) and `big` (each of the two in
turn) serve tests/service/api/test_tensor_ranges.py (the bytes as an API)
and tests/service/process/test_tensor_bytes.py (the bytes on the wire).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from support.service_harness import ServiceUnderTest

BIG_DIMS = [1024, 1024]  # 4 MiB of float32: far above SMALL_BYTES (256 KiB) of service/api/tensor_responses.py
LARGE = 300_000  # a range above SMALL_BYTES: sent from the file
MIB = 1 << 20
# Tensor names of names.onnx: U+FFFD (what `%FF` used to decode to), and names holding NUL
NAMES = {"\ufffd": 1.0, "a": 2.0, "a\x00b": 3.0, "a\x00c": 4.0, "ab": 5.0}


def values(seed: int, count: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(count, dtype=np.float32)


def write_model(path: Path, tensor: np.ndarray, location: str | None = None) -> Path:
    """y = Identity(Big): Big inline, or in external data at `location` (next to the model)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["Big"], ["y"])],
        "tensor-bytes",
        [],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, list(tensor.shape))],
        [numpy_helper.from_array(tensor, "Big")],
    )
    model = helper.make_model(graph)
    path.parent.mkdir(parents=True, exist_ok=True)
    if location is None:
        onnx.save(model, str(path))
    else:
        onnx.save(model, str(path), save_as_external_data=True, location=location, size_threshold=0)
    return path


def names_model(path: Path) -> Path:
    """y = Sum of the tensors named NAMES, each two of its value."""
    initializers = [numpy_helper.from_array(np.full([2], value, dtype=np.float32), name) for name, value in NAMES.items()]
    total = helper.make_node("Sum", list(NAMES), ["y"])
    graph = helper.make_graph([total], "names", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, str(path))
    return path


def import_path(client: httpx.Client, path: str) -> str:
    imported = client.post("/models", json={"path": path})
    assert imported.status_code in (200, 201), imported.text
    model_id: str = imported.json()["id"]
    return model_id


@dataclass(frozen=True)
class Tensor:
    url: str
    etag: str
    content: bytes


def imported_w(server: ServiceUnderTest) -> Tensor:
    """Tensor W of add.onnx, imported by path on `server`."""
    with server.client() as client:
        url = f"/models/{import_path(client, 'add.onnx')}/tensors/W"
        whole = client.get(url)
        assert whole.status_code == 200
        return Tensor(url, whole.headers["etag"], whole.content)


@dataclass(frozen=True)
class Big:
    url: str  # /models/{id}/tensors/Big
    raw: bytes  # onnx's bytes of the tensor
    array: np.ndarray


@pytest.fixture(scope="module")
def big_reference(data_root: Path) -> np.ndarray:
    """Big as onnx reads it."""
    array: np.ndarray = numpy_helper.to_array(onnx.load(str(data_root / "big" / "model.onnx")).graph.initializer[0])
    assert array.dtype == np.float32 and list(array.shape) == BIG_DIMS
    return array


@pytest.fixture(scope="module")
def big_uploaded(server: ServiceUnderTest, data_root: Path, big_reference: np.ndarray) -> Big:
    model = (data_root / "big" / "model.onnx").read_bytes()
    with server.client() as client:
        response = client.post("/models", files=[("model", ("big.onnx", model, "application/octet-stream"))])
    assert response.status_code == 201, response.text
    return Big(f"/models/{response.json()['id']}/tensors/Big", big_reference.tobytes(), big_reference)


@pytest.fixture(scope="module")
def big_by_path(server: ServiceUnderTest, big_reference: np.ndarray) -> Big:
    with server.client() as client:
        return Big(f"/models/{import_path(client, 'big/model.onnx')}/tensors/Big", big_reference.tobytes(), big_reference)


@pytest.fixture(scope="module", params=["big_uploaded", "big_by_path"])
def big(request: pytest.FixtureRequest, server: ServiceUnderTest) -> Big:
    """Big uploaded (its bytes in the store) and imported by path (in the data root).

    It names `server` so that it is made again with each server (store kind)."""
    found: Big = request.getfixturevalue(request.param)
    return found
