"""Small valid models made with onnx, each unique to a seed.

`weight_model(seed, values)`: one Add of an input and a float32 weight of
`values` values, all `seed`, so each seed gives other bytes (another id) and
`values` sets the size; the fleet's tests post many of them at once.
`unnamed_reshape()`: an input whose dimensions have no names (as silero_vad
declares), reshaped to [2, -1], for the smoke run's bindings by input and axis.
`external_weight_model(location, values)`: a weight of `values` float32 zeros
in the external file `location` (any text: one outside the rules too).
`summed_external_model(*locations)`: one float weight per location, each the
first 4 bytes of the file it names, summed (a model of many external files).
`wrong_output_type()`: a Relu of a float input whose output is declared int64:
it imports, and its shape stage fails (a model that is checked and FAILED).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def weight_model(seed: int, values: int = 1024) -> bytes:
    """A small valid model whose weight `W` makes its bytes (and id) unique to `seed`."""
    weight = numpy_helper.from_array(np.full((values,), seed, dtype=np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])],
        f"weights{seed}",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [values])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [values])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    data: bytes = model.SerializeToString()
    return data


def unnamed_reshape() -> bytes:
    """x: float [?, ?] (dimensions without names), reshaped to [2, -1]: unbound (1 each), one element cannot be."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="halves")],
        "unnamed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, None])],
        [helper.make_tensor("shape", TensorProto.INT64, [2], [2, -1])],
    )
    data: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    return data


def external_weight_model(location: str, values: int) -> bytes:
    """A model whose one weight `W`, `values` float32 zeros, is the first `values * 4` bytes of the external file `location`."""
    weight = numpy_helper.from_array(np.zeros(values, np.float32), "W")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(values * 4))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    output = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [values])
    graph = helper.make_graph([helper.make_node("Identity", ["W"], ["Y"])], "external", [], [output], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    data: bytes = model.SerializeToString()
    return data


def summed_external_model(*locations: str) -> bytes:
    """One float tensor per location, each the first 4 bytes of the file it names, summed."""
    tensors = []
    for index, location in enumerate(locations):
        tensor = numpy_helper.from_array(np.zeros([1], np.float32), f"w{index}")
        tensor.data_location = TensorProto.EXTERNAL
        tensor.ClearField("raw_data")
        for key, value in (("location", location), ("offset", "0"), ("length", "4")):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        tensors.append(tensor)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Sum", [t.name for t in tensors], ["y"])], "g", [], [y], tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data: bytes = model.SerializeToString()
    return data


def wrong_output_type() -> bytes:
    """x: float [batch, 2] through a Relu to y, declared int64: the shape stage finds the declared type wrong."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "wrong_type",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, ["batch", 2])],
    )
    data: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    return data
