"""Small valid models made with onnx, each unique to a seed.

`weight_model(seed, values)`: one Add of an input and a float32 weight of
`values` values, all `seed`, so each seed gives other bytes (another id) and
`values` sets the size; the fleet's tests post many of them at once.
`unnamed_reshape()`: an input whose dimensions have no names (as silero_vad
declares), reshaped to [2, -1], for the smoke run's bindings by input and axis.
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
