"""Does a graph another tenant viewed answer a tenant's first request faster?
The measurement shared by tests/service/process/test_service_tenancy.py and bench/redteam.py.

Owns `chain_model(nodes, seed)` (a chain of Relu/Neg nodes; the seed makes
each model's bytes, and so its id, unique) and `first_graph_trials`: for each
trial both tenants upload the same new model (one id), and the second
tenant's first `GET /graph` is timed, after the first tenant viewed it (even
trials) or with nobody having viewed it (odd trials), then its second,
cached for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx
import numpy as np
from onnx import TensorProto, helper, numpy_helper

TRIAL_NODES = 3000  # a render of tens of milliseconds here: a cache would show


@dataclass(frozen=True)
class Trial:
    viewed_before: bool  # the first tenant viewed the graph before the second tenant's first request
    first_seconds: float  # the second tenant's first GET /graph
    again_seconds: float  # its second GET /graph


def chain_model(nodes: int, seed: int) -> bytes:
    """`nodes` Relu/Neg nodes in a chain, with a weight that makes each model's bytes unique."""
    made = [helper.make_node(["Relu", "Neg"][i % 2], [f"v{i}"], [f"v{i + 1}"], name=f"n{i}") for i in range(nodes)]
    made.append(helper.make_node("Add", [f"v{nodes}", "W"], ["Y"], name="last"))
    weight = numpy_helper.from_array(np.full((4,), seed, dtype=np.float32), "W")
    graph = helper.make_graph(
        made,
        f"chain{seed}",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    data: bytes = model.SerializeToString()
    return data


def _graph_seconds(client: httpx.Client, headers: dict[str, str], model_id: str) -> float:
    started = time.perf_counter()
    response = client.get(f"/models/{model_id}/graph", headers=headers)
    seconds = time.perf_counter() - started
    assert response.status_code == 200, response.text[:300]
    return seconds


def first_graph_trials(client: httpx.Client, first: dict[str, str], second: dict[str, str], trials: int, seed: int) -> list[Trial]:
    """`trials` of each kind, alternating (viewed by `first` before, or not), in order."""
    done = []
    for trial in range(2 * trials):
        data = chain_model(TRIAL_NODES, seed + trial)
        model_id = client.post("/models", files={"model": ("a.onnx", data)}, headers=first).json()["id"]
        again = client.post("/models", files={"model": ("b.onnx", data)}, headers=second).json()["id"]
        assert again == model_id, (again, model_id)  # the same bytes: one model
        viewed = trial % 2 == 0
        if viewed:
            _graph_seconds(client, first, model_id)
        done.append(Trial(viewed, _graph_seconds(client, second, model_id), _graph_seconds(client, second, model_id)))
    return done
