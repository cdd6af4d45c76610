"""`onnx-import check` sizes the check worker's memory to the model as the
service does, its external data counted (listed by a worker first): a model
whose external weights need more than `--worker-memory-share` allows is
`incomplete` (exit 2), the reason naming the memory it needs and the settings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

COMMAND = Path(sys.executable).with_name("onnx-import")
WEIGHT_FLOATS = 100_000  # 400 KB of external weights: 400 MB of check worker at 1000 per byte


def external_weighted_relu(folder: Path) -> Path:
    """y = relu(x + w), w 400 KB in `weights.bin` beside the model (a few hundred bytes)."""
    weight = numpy_helper.from_array(np.ones(WEIGHT_FLOATS, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["s"], name="add"), helper.make_node("Relu", ["s"], ["y"], name="relu")],
        "external_weighted_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WEIGHT_FLOATS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, WEIGHT_FLOATS])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / "model.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    return path


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(COMMAND), *map(str, args)], capture_output=True, text=True, timeout=300)


def test_the_check_worker_is_sized_to_the_model_and_its_external_data(tmp_path: Path) -> None:
    model = external_weighted_relu(tmp_path)
    assert model.stat().st_size < 1000
    # its external data counts at the mapped multiple where files are bound for onnxruntime, else at the model's: both 1000
    sizing = ("--worker-memory", "256MiB", "--worker-memory-per-model-byte", "1000", "--worker-memory-per-mapped-byte", "1000")
    fits = run("check", model, "--checks", "schema,runtime,smoke", *sizing)
    assert fits.returncode == 0, fits.stdout + fits.stderr
    past = run("check", model, "--checks", "schema,runtime,smoke", *sizing, "--worker-memory-share", "0.1%")
    assert past.returncode == 2, past.stdout + past.stderr
    checks = json.loads(past.stdout)["checks"]
    assert checks["schema"]["status"] == "pass"
    for stage in ("runtime", "smoke"):
        reason = checks[stage]["reason"]
        assert checks[stage]["status"] == "incomplete", checks[stage]
        assert "the model needs about 38" in reason and "MiB of worker memory (1000 × its" in reason and "391 KiB" in reason, reason
        assert "--worker-memory-share 0.1% of the machine's" in reason, reason
