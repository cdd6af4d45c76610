"""A resumable upload (tus) goes on on any replica, and outlives the one it began on.

Real processes: three replicas over one bucket and one database (`Fleet`,
tests/service/fleet/test_fleet_replicas.py). The client's resumable import,
each request sent to the next replica (as the fleet's round-robin load
balancer does): created on one, sent to another, imported on the third.
Then a model of tens of MiB, random bytes, is sent to replica 1, which is killed with SIGKILL mid-PATCH once a
part of it is durable; replica 2 answers HEAD with what is durable (the
part sent, not what the dead replica had buffered), refuses a second writer
while the dead one's lease lasts, then takes the rest in two PATCHes (an
incomplete part between them); replica 3 imports it, and serves the model's
weight byte for byte as the file holds it.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import signal
import threading
import time
from base64 import b64encode
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.service_harness import ServiceProcess
from test_fleet_replicas import Fleet

from service.client import Client
from service.store.uploads import LEASE_SECONDS, PART_BYTES

MIB = 1 << 20
TUS = {"Tus-Resumable": "1.0.0"}
PATCHING = {**TUS, "Content-Type": "application/offset+octet-stream"}


def random_weight_model(values: int, seed: int = 37) -> tuple[bytes, bytes]:
    """A valid model whose weight `W` is `values` random float32s: (the model, W's bytes)."""
    weight = np.random.default_rng(seed).random(values, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])],
        "random",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [values])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [values])],
        [numpy_helper.from_array(weight, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model.SerializeToString(), weight.tobytes()


def durable_offset(client: httpx.Client, location: str) -> int:
    answer = client.head(location, headers=TUS)
    assert answer.status_code == 200, answer.status_code
    return int(answer.headers["Upload-Offset"])


@pytest.fixture(scope="module")
def fleet(fleet_servers: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    started = Fleet(fleet_servers, tmp_path_factory.mktemp("fleet"), 0)
    try:
        with ThreadPoolExecutor(3) as starting:  # at once: a replica's start is mostly waiting
            started.replicas = list(starting.map(started.replica, range(3)))
        yield started
    finally:
        started.stop()


class RoundRobin(httpx.BaseTransport):
    """Each request to the next replica, as the fleet's load balancer (HAProxy, round robin) sends them."""

    def __init__(self, replicas: list[ServiceProcess]) -> None:
        self.ports = [replica.port for replica in replicas]
        self.turns = itertools.count()
        self.sent: list[tuple[str, str, int]] = []  # (method, path, the replica's port)
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        port = self.ports[next(self.turns) % len(self.ports)]
        request.url = request.url.copy_with(port=port)
        self.sent.append((request.method, request.url.path, port))
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def test_the_clients_resumable_import_goes_on_whichever_replica_each_request_reaches(fleet: Fleet, tmp_path: Path) -> None:
    model, weight = random_weight_model(5_000_000, seed=38)  # about 19 MiB: two parts and the last, short one
    path = tmp_path / "spread.onnx"
    path.write_bytes(model)
    balancer = RoundRobin(fleet.replicas)
    with Client(fleet.replicas[0].url, transport=balancer, resume_store=tmp_path / "resume") as client:
        summary = client.import_file(path, resumable=True)
    assert summary["input"] == "spread.onnx" and summary["model_file"]["sha256"] == hashlib.sha256(model).hexdigest()
    steps = [(method, port) for method, request_path, port in balancer.sent if request_path.startswith(("/uploads", "/models"))]
    assert [method for method, _ in steps] == ["POST", "PATCH", "POST"]  # created, sent, imported
    assert len({port for _, port in steps}) == 3  # each on another replica
    with fleet.replicas[1].client() as reader:
        assert reader.get(f"/models/{summary['id']}/tensors/W").content == weight


def test_an_upload_begun_on_a_replica_killed_mid_patch_is_resumed_on_another_and_imported_on_a_third(fleet: Fleet) -> None:
    first, second, third = fleet.replicas
    model, weight = random_weight_model(6_000_000)  # about 23 MiB: parts, and an incomplete part
    metadata = f"filename {b64encode(b'random.onnx').decode()}"
    with first.client() as client:
        created = client.post("/uploads", headers={**TUS, "Upload-Length": str(len(model)), "Upload-Metadata": metadata})
    assert created.status_code == 201, created.text
    location = created.headers["Location"]

    sent_part = threading.Event()

    def body() -> Iterator[bytes]:  # a part and some more, then the connection stays open, waiting
        for start in range(0, PART_BYTES + 3 * MIB, MIB):
            yield model[start : start + MIB]
        sent_part.set()
        time.sleep(60)

    def patch_to_the_victim() -> None:
        try:
            with first.client() as client:
                client.patch(location, headers={**PATCHING, "Upload-Offset": "0"}, content=body())
        except httpx.HTTPError:
            pass  # the replica died under it

    threading.Thread(target=patch_to_the_victim, daemon=True).start()
    assert sent_part.wait(30)
    with second.client() as client:
        deadline = time.monotonic() + 10
        while durable_offset(client, location) < PART_BYTES and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.process is not None
        os.kill(first.process.pid, signal.SIGKILL)
        first.process.wait()
        assert durable_offset(client, location) == PART_BYTES  # the part sent; not the 3 MiB the dead replica buffered

        killed_at = time.monotonic()
        while (
            answer := client.patch(location, headers={**PATCHING, "Upload-Offset": str(PART_BYTES)}, content=model[PART_BYTES : 12 * MIB])
        ).status_code == 409:
            assert time.monotonic() - killed_at < LEASE_SECONDS + 5, "the dead replica's lease never lapsed"
            time.sleep(0.5)
        assert answer.status_code == 204, answer.text
        assert int(answer.headers["Upload-Offset"]) == 12 * MIB == durable_offset(client, location)  # 4 MiB short of a part
        answer = client.patch(location, headers={**PATCHING, "Upload-Offset": str(12 * MIB)}, content=model[12 * MIB :])
        assert answer.status_code == 204, answer.text
        assert durable_offset(client, location) == len(model)

    with third.client() as client:
        imported = client.post("/models", json={"upload": location.rsplit("/", 1)[1]})
        assert imported.status_code == 201, imported.text
        model_id = imported.json()["id"]
        assert imported.json()["input"] == "random.onnx"
        served = client.get(f"/models/{model_id}/tensors/W")
        assert served.status_code == 200 and served.content == weight
        assert client.head(location, headers=TUS).status_code == 404  # the upload is removed once imported
