"""The check worker's memory sized to the model, through the real service (in
the test process over ASGI, its workers real): a model that would need more
than a worker may take (`--worker-memory-share`) answers `incomplete` for
the stages of the check worker, without one, its reason naming the memory
it needs and the settings, while the import itself stands; a run that runs
out of memory names the cap it ran under and the setting that raises it;
/readyz and /metrics tell the operator the budget and what is reserved of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.asgi_service import serving_over_asgi

ALL = "schema,security,shape,runtime,smoke"
WEIGHT_FLOATS = 100_000  # 400 KB of weights: 400 MB of worker memory at 1000 per byte


def weighted_relu(path: Path) -> Path:
    """y = relu(x + w), w an inline initializer of 400 KB."""
    weight = numpy_helper.from_array(np.ones(WEIGHT_FLOATS, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["s"], name="add"), helper.make_node("Relu", ["s"], ["y"], name="relu")],
        "weighted_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WEIGHT_FLOATS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", WEIGHT_FLOATS])],
        [weight],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def post(client: httpx.Client, path: Path, query: str) -> dict[str, Any]:
    response = client.post(f"/models{query}", files=[("model", (path.name, path.read_bytes()))])
    assert response.status_code in (200, 201), response.text
    summary: dict[str, Any] = response.json()
    return summary


def test_a_model_past_the_share_is_incomplete_naming_the_memory_it_needs(tmp_path: Path, data_root: Path) -> None:
    model = weighted_relu(tmp_path / "weighted.onnx")
    # 400 MB needed, past --worker-memory and the share (MBs of the machine's)
    sizing = ("--worker-memory", "256MiB", "--worker-memory-per-model-byte", "1000", "--worker-memory-share", "0.1%")
    with serving_over_asgi(tmp_path / "store", data_root, *sizing) as service, service.client() as session:
        summary = post(session, model, f"?checks={ALL}")
    checks = summary["checks"]
    assert (checks["schema"]["status"], checks["security"]["status"]) == ("pass", "pass")
    for stage in ("shape", "runtime", "smoke"):
        assert checks[stage]["status"] == "incomplete", checks[stage]
        reason = checks[stage]["reason"]
        assert "the model needs about 38" in reason and "MiB of worker memory (1000 × its 39" in reason, reason
        assert "--worker-memory-per-model-byte" in reason and "--worker-memory-share 0.1% of the machine's" in reason, reason
        assert reason.endswith("raise --worker-memory-share or give the service's cgroup more memory"), reason
    assert summary["verdict"] == "incomplete"


def test_a_run_out_of_memory_names_the_cap_it_ran_under(tmp_path: Path, data_root: Path) -> None:
    model = weighted_relu(tmp_path / "weighted.onnx")
    sizing = ("--worker-memory", "256MiB", "--worker-memory-per-model-byte", "1000")  # a cap of about 400 MB
    with serving_over_asgi(tmp_path / "store", data_root, *sizing) as service, service.client() as session:
        summary = post(session, model, f"?checks={ALL}")
        assert summary["verdict"] == "pass", summary["checks"]
        large = post(session, model, f"?checks={ALL}&dim=batch:2000")  # 800 MB of input, 800 MB of output
    smoke = large["checks"]["smoke"]
    assert smoke["status"] == "incomplete", smoke
    assert "memory" in smoke["reason"], smoke
    assert "(the check worker's cap was 38" in smoke["reason"], smoke
    assert "MiB: --worker-memory-per-model-byte 1000 × its 39" in smoke["reason"], smoke
    assert smoke["reason"].endswith("raise --worker-memory-per-model-byte or --worker-memory)"), smoke


def test_readyz_and_metrics_show_the_memory_budget_the_share_gives(tmp_path: Path, data_root: Path) -> None:
    budgets = {}
    for share in ("10%", "20%"):
        store = tmp_path / f"store-{share}"
        with serving_over_asgi(store, data_root, "--worker-memory-share", share) as service, service.client() as session:
            ready = session.get("/readyz").json()
            metrics = session.get("/metrics").text
        budget = ready["worker_memory_budget_bytes"]
        assert ready["worker_memory_reserved_bytes"] == 0, ready  # no sized worker runs
        gauges = dict(line.split(" ", 1) for line in metrics.splitlines() if line.startswith("onnx_import_worker_memory"))
        assert float(gauges["onnx_import_worker_memory_budget_bytes"]) == budget, gauges
        assert float(gauges["onnx_import_worker_memory_reserved_bytes"]) == 0, gauges
        budgets[share] = budget
    assert budgets["10%"] > 0 and 1.98 < budgets["20%"] / budgets["10%"] < 2.02, budgets  # the share of one memory


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    folder = tmp_path / "root"
    folder.mkdir()
    return folder
