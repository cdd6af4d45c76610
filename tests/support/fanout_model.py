"""The function fan-out model of issue 35: a few KB that inline to 2^depth nodes.

`fanout_model(depth)`: model-local functions f0 (one Relu) to f{depth}, each
f{k} calling f{k-1} twice, and a main graph that calls f{depth} once. onnx's
shape inference and onnxruntime inline every call: at depth 40 (3 KB) that is
2^40 nodes, which no worker limit finishes. Counted without inlining, the
call expands to 2^depth nodes.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

DOMAIN = "fanout"


def fanout_model(depth: int = 40, *, calls: int = 1) -> onnx.ModelProto:
    """The model; `calls` calls of f{depth} in a row in the main graph."""
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)]
    functions = [helper.make_function(DOMAIN, "f0", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])], opsets[:1])]
    for k in range(1, depth + 1):
        twice = [helper.make_node(f"f{k - 1}", ["x"], ["t"], domain=DOMAIN), helper.make_node(f"f{k - 1}", ["t"], ["y"], domain=DOMAIN)]
        functions.append(helper.make_function(DOMAIN, f"f{k}", ["x"], ["y"], twice, opsets))
    names = ["x", *(f"v{index}" for index in range(1, calls)), "y"]
    nodes = [
        helper.make_node(f"f{depth}", [names[index]], [names[index + 1]], domain=DOMAIN, name=f"call{index}") for index in range(calls)
    ]
    graph = helper.make_graph(
        nodes,
        "fanout",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=opsets, functions=functions)
    model.ir_version = 10
    return model
