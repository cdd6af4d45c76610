"""Writes the bundled sample models into testdata/samples/ (committed too).

The service serves this folder by default (`python -m service`); the service
tests import every sample. Deterministic: running it again gives the same bytes.

    add.onnx              Y = (X + W) * c: W in raw_data, c a Constant node's tensor
    typed_fields.onnx     initializers in float_data, int32_data, int64_data,
                          double_data and string_data, and a sparse initializer
    if_subgraph.onnx      an If whose branches hold Constant tensors and read an
                          outer initializer (captures)
    external/model.onnx   MatMul + Add with weights in external/weights.bin and
                          the bias in external/more/bias.bin

Usage: python tools/make_samples.py [OUT_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
OPSET = [helper.make_opsetid("", 21)]


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=OPSET, producer_name="tools/make_samples.py", producer_version="1")
    model.ir_version = 10
    return model


def add_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3) / 4, name="W")
    c = helper.make_node("Constant", [], ["c"], name="scale", value=numpy_helper.from_array(np.array(1.5, dtype=np.float32), "c_value"))
    graph = helper.make_graph(
        [c, helper.make_node("Add", ["X", "W"], ["S"], name="add"), helper.make_node("Mul", ["S", "c"], ["Y"], name="mul")],
        "add",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])],
        [w],
    )
    return _model(graph)


def typed_fields_model() -> onnx.ModelProto:
    initializers = [
        helper.make_tensor("f32", TensorProto.FLOAT, [2, 2], [0.5, -1.0, 2.25, 3.0]),
        helper.make_tensor("i32", TensorProto.INT32, [5], [1, -2, 3, 400000, -5]),
        helper.make_tensor("i16", TensorProto.INT16, [3], [-7, 8, 300]),
        helper.make_tensor("i64", TensorProto.INT64, [2, 2], [1, -1, 2**40, -(2**40)]),
        helper.make_tensor("f64", TensorProto.DOUBLE, [3], [0.1, 0.2, 0.3]),
        helper.make_tensor("flags", TensorProto.BOOL, [4], [True, False, True, True]),
        helper.make_tensor("half", TensorProto.FLOAT16, [2], np.array([1.5, -2.0], dtype=np.float16).view(np.uint16).tolist()),
        helper.make_tensor("words", TensorProto.STRING, [3], [b"alpha", b"", "\u00e9t\u00e9".encode()]),  # type: ignore[list-item]
    ]
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("sparse", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0]),
        helper.make_tensor("sparse_indices", TensorProto.INT64, [3], [0, 5, 9]),
        [10],
    )
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"], name="identity")],
        "typed_fields",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N"])],
        initializers,
        sparse_initializer=[sparse],
    )
    return _model(graph)


def if_model() -> onnx.ModelProto:
    def branch(name: str, value: float) -> onnx.GraphProto:
        constant = helper.make_node(
            "Constant", [], [f"{name}_c"], name=f"{name}_const", value=numpy_helper.from_array(np.full([3], value, dtype=np.float32), "k")
        )
        add = helper.make_node("Add", [f"{name}_c", "offset"], [f"{name}_out"], name=f"{name}_add")
        return helper.make_graph([constant, add], name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [3])])

    offset = numpy_helper.from_array(np.array([10.0, 20.0, 30.0], dtype=np.float32), name="offset")
    node = helper.make_node("If", ["cond"], ["Y"], name="choose", then_branch=branch("then", 1.0), else_branch=branch("else", -1.0))
    graph = helper.make_graph(
        [node],
        "if_subgraph",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3])],
        [offset],
    )
    return _model(graph)


def external_model(folder: Path) -> onnx.ModelProto:
    weights = np.arange(64 * 32, dtype=np.float32).reshape(64, 32) / 1024
    bias = np.linspace(-1, 1, 32, dtype=np.float32)
    (folder / "more").mkdir(parents=True, exist_ok=True)
    (folder / "weights.bin").write_bytes(b"\0" * 16 + weights.tobytes())  # the tensor at offset 16
    (folder / "more" / "bias.bin").write_bytes(bias.tobytes())
    w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=list(weights.shape))
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "weights.bin"), ("offset", "16"), ("length", str(weights.nbytes))):
        w.external_data.add(key=key, value=value)
    b = TensorProto(name="B", data_type=TensorProto.FLOAT, dims=list(bias.shape))
    b.data_location = TensorProto.EXTERNAL
    b.external_data.add(key="location", value="more/bias.bin")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["H"], name="matmul"), helper.make_node("Add", ["H", "B"], ["Y"], name="bias")],
        "external",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 32])],
        [w, b],
    )
    return _model(graph)


def write_samples(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, model in (("add.onnx", add_model()), ("typed_fields.onnx", typed_fields_model()), ("if_subgraph.onnx", if_model())):
        (out / name).write_bytes(model.SerializeToString())
        written.append(out / name)
    external = out / "external"
    external.mkdir(exist_ok=True)
    (external / "model.onnx").write_bytes(external_model(external).SerializeToString())
    written.append(external / "model.onnx")
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "testdata" / "samples"
    for path in write_samples(target):
        print(path)
