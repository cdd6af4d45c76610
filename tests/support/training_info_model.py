"""A model whose `training_info` holds an initializer of external data (issue 35).

`training_info_model(location)`: a main graph of one Relu, and one
TrainingInfoProto whose `initialization` graph has one initializer "w"
(4 floats, 16 bytes) with data_location EXTERNAL at `location` (an absolute
path, a `..` path, or a file beside the model), plus an `algorithm` graph and
the bindings, as onnx's helper writes them. `onnx.load` never reads that
tensor's data; the importer confines it like the main graph's.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

FIELD_PATH = "ModelProto.training_info[0].initialization.initializer[0]"


def external_tensor(name: str, location: str) -> onnx.TensorProto:
    tensor = onnx.TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def training_info_model(location: str, *, initialization_nodes: list[onnx.NodeProto] | None = None) -> onnx.ModelProto:
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])
    initialization = helper.make_graph(initialization_nodes or [], "initialization", [], [w], [external_tensor("w", location)])
    algorithm = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["w_new"])], "algorithm", [], [helper.make_tensor_value_info("w_new", TensorProto.FLOAT, [4])]
    )
    training = onnx.TrainingInfoProto()
    training.initialization.CopyFrom(initialization)
    training.algorithm.CopyFrom(algorithm)
    training.update_binding.add(key="w", value="w_new")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "main",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    model.training_info.append(training)
    return model
