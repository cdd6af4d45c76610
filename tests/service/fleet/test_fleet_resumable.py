"""A resumable upload (tus) outlives the replica it began on.

Real processes: three replicas over one bucket and one database (`Fleet`,
tests/service/fleet/test_fleet_replicas.py). A model of tens of MiB, random
bytes, is sent to replica 1, which is killed with SIGKILL mid-PATCH once a
part of it is durable; replica 2 answers HEAD with what is durable (the
part sent, not what the dead replica had buffered), refuses a second writer
while the dead one's lease lasts, then takes the rest in two PATCHes (an
incomplete part between them); replica 3 imports it, and serves the model's
weight byte for byte as the file holds it.
"""

from __future__ import annotations

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
from onnx import TensorProto, helper, numpy_helper
from test_fleet_replicas import Fleet

from service.store.fleet_uploads import LEASE_SECONDS, PART_BYTES

MIB = 1 << 20
TUS = {"Tus-Resumable": "1.0.0"}
PATCHING = {**TUS, "Content-Type": "application/offset+octet-stream"}


def random_weight_model(values: int) -> tuple[bytes, bytes]:
    """A valid model whose weight `W` is `values` random float32s: (the model, W's bytes)."""
    weight = np.random.default_rng(37).random(values, dtype=np.float32)
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


def test_an_upload_begun_on_a_replica_killed_mid_patch_is_resumed_on_another_and_imported_on_a_third(
    fleet_servers: Any, tmp_path: Path
) -> None:
    fleet = Fleet(fleet_servers, tmp_path, 0)
    try:
        with ThreadPoolExecutor(3) as starting:  # at once: a replica's start is mostly waiting
            fleet.replicas = list(starting.map(fleet.replica, range(3)))
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
                answer := client.patch(
                    location, headers={**PATCHING, "Upload-Offset": str(PART_BYTES)}, content=model[PART_BYTES : 12 * MIB]
                )
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
    finally:
        fleet.stop()
