"""Generates the benchmark models into the ignored cache .cache/bench/ (idempotent).

1. weights-inline.onnx: about 800 MB of float32 initializers in raw_data
   (24 layers of two 1024x4096 matrices), inside the model file;
2. weights-external.onnx + weights-external.data: the same weights in one
   external data file;
3. nodes.onnx: 200,000 nodes with names, a third of them with an attribute,
   and value_info for half the values (about 11 MB);
4. the whole ONNX backend test data (tools/gen_backend_data.py), listed in
   backend-models.txt.

Usage: python bench/make_models.py [--small] (--small: 1/64 of the weights
and 1/100 of the nodes, to try the harness quickly; BENCH_CACHE=DIR writes
them elsewhere than .cache/bench).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("BENCH_CACHE", REPO / ".cache" / "bench"))
sys.path.insert(0, str(REPO / "tools"))


def _weights_graph(layers: int, rows: int, cols: int) -> onnx.GraphProto:
    rng = np.random.default_rng(0)
    initializers, nodes = [], []
    previous = "x"
    for layer in range(layers):
        up = numpy_helper.from_array(rng.standard_normal((rows, cols), dtype=np.float32), f"layer{layer}.up")
        down = numpy_helper.from_array(rng.standard_normal((cols, rows), dtype=np.float32), f"layer{layer}.down")
        initializers += [up, down]
        nodes.append(helper.make_node("MatMul", [previous, up.name], [f"h{layer}"], name=f"layer{layer}.matmul_up"))
        nodes.append(helper.make_node("MatMul", [f"h{layer}", down.name], [f"y{layer}"], name=f"layer{layer}.matmul_down"))
        previous = f"y{layer}"
    return helper.make_graph(
        nodes,
        "weights",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", rows])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, ["batch", rows])],
        initializers,
    )


def make_weight_models(small: bool) -> None:
    inline, external = CACHE / "weights-inline.onnx", CACHE / "weights-external.onnx"
    if inline.exists() and external.exists():
        return
    rows, cols = (128, 512) if small else (1024, 4096)
    model = helper.make_model(_weights_graph(24, rows, cols), opset_imports=[helper.make_opsetid("", 21)])
    onnx.save(model, inline)
    onnx.save(model, external, save_as_external_data=True, all_tensors_to_one_file=True, location="weights-external.data")


def make_node_model(small: bool) -> None:
    path = CACHE / "nodes.onnx"
    if path.exists():
        return
    count = 2_000 if small else 200_000
    nodes, value_info = [], []
    previous = "x"
    for index in range(count):
        output = f"v{index}"
        if index % 3 == 0:
            nodes.append(helper.make_node("LeakyRelu", [previous], [output], name=f"node_{index}", alpha=0.5))
        else:
            nodes.append(helper.make_node("Relu", [previous], [output], name=f"node_{index}"))
        if index % 2 == 0:
            value_info.append(helper.make_tensor_value_info(output, TensorProto.FLOAT, [1, 16]))
        previous = output
    graph = helper.make_graph(
        nodes,
        "nodes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, 16])],
        value_info=value_info,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)


def make_backend_list() -> None:
    import gen_backend_data

    backend = REPO / ".cache" / "onnx-backend"
    manifest = gen_backend_data.build(backend)
    lines = [str(backend / relative) for relative in manifest["models"]]
    (CACHE / "backend-models.txt").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    CACHE.mkdir(parents=True, exist_ok=True)
    make_weight_models(args.small)
    make_node_model(args.small)
    make_backend_list()
    for path in sorted(CACHE.iterdir()):
        print(f"{path.name}: {path.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
