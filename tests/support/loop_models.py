"""Small `Loop` models, made with onnx's helper: the endless kind and the while-loop kind.

- `constant_loop(trips)`: a Loop whose trip count is an int64 initializer
  `M`, its condition a constant True, its body scalar: `Identity(cond_in)`
  as the condition out and `Add(v_in, one)` as the carried value. Nothing
  ends it before `M`: with M = 10^15 it is about 290 bytes asking for 10^15
  iterations. Input `v0` (float scalar), output `v` (v0 + trips).
- `while_loop(limit)`: the torch export's kind, M = INT64_MAX and a body that
  computes its condition (`Less(i + 1, limit)`): it ends after `limit`
  iterations.
- `graph_of_loop` and `loop_body` put those pieces together otherwise (a
  Loop inside an If's branch, a trip count from a Constant node, a string
  input beside it).
- `computed_loop(seed)`: the endless kind, its trip count 10^15 computed in
  float (`Cast(Mul(Constant 1e7, Constant 1e8 + 8 seed))`), which the
  security stage's estimate does not fold: only the smoke run's CPU budget
  (`--smoke-cpu-seconds`) stops it. `seed` makes another model.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

ENDLESS_TRIPS = 10**15
INT64_MAX = 2**63 - 1
OPSET = 17


def loop_body(condition: str = "keep") -> onnx.GraphProto:
    """A scalar Loop body: v_out = v_in + 1; its condition out is `cond_in`
    through Identity ("keep"), a constant True ("true"), or i + 1 < limit,
    `limit` an outer value ("less")."""
    nodes = [helper.make_node("Add", ["v_in", "one"], ["v_out"])]
    initializers = [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])]
    if condition == "keep":
        nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    elif condition == "true":
        nodes.append(helper.make_node("Constant", [], ["cond_out"], value=helper.make_tensor("t", TensorProto.BOOL, [], [True])))
    else:
        initializers.append(helper.make_tensor("step", TensorProto.INT64, [], [1]))
        nodes += [helper.make_node("Add", ["i", "step"], ["next"]), helper.make_node("Less", ["next", "limit"], ["cond_out"])]
    return helper.make_graph(
        nodes,
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, []),
        ],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [])],
        initializer=initializers,
    )


def loop_node(body: onnx.GraphProto, trips: str = "M", condition: str = "cond") -> onnx.NodeProto:
    return helper.make_node("Loop", [trips, condition, "v0"], ["v"], body=body, name="loop")


def graph_of_loop(
    nodes: list[onnx.NodeProto],
    initializers: list[onnx.TensorProto],
    extra_inputs: list[onnx.ValueInfoProto] | None = None,
    extra_outputs: list[onnx.ValueInfoProto] | None = None,
) -> onnx.ModelProto:
    """A model of `nodes`: input v0 (float scalar) and `extra_inputs`, output v (float scalar) and `extra_outputs`."""
    graph = helper.make_graph(
        nodes,
        "loop",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, []), *(extra_inputs or [])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, []), *(extra_outputs or [])],
        initializer=initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def trips_and_true(trips: int) -> list[onnx.TensorProto]:
    """The initializers M (int64 scalar `trips`) and cond (True)."""
    return [helper.make_tensor("M", TensorProto.INT64, [], [trips]), helper.make_tensor("cond", TensorProto.BOOL, [], [True])]


def constant_loop(trips: int = ENDLESS_TRIPS) -> onnx.ModelProto:
    return graph_of_loop([loop_node(loop_body())], trips_and_true(trips))


def while_loop(limit: int) -> onnx.ModelProto:
    limit_tensor = helper.make_tensor("limit", TensorProto.INT64, [], [limit])
    return graph_of_loop([loop_node(loop_body("less"))], [*trips_and_true(INT64_MAX), limit_tensor])


def computed_loop(seed: int = 0) -> onnx.ModelProto:
    factors = [
        helper.make_node("Constant", [], [name], value=helper.make_tensor(name, TensorProto.FLOAT, [], [value]))
        for name, value in (("a", 1e7), ("b", 1e8 + 8 * seed))  # float32 holds 1e8 + 8k exactly
    ]
    trips = [helper.make_node("Mul", ["a", "b"], ["m_float"]), helper.make_node("Cast", ["m_float"], ["M"], to=TensorProto.INT64)]
    return graph_of_loop([*factors, *trips, loop_node(loop_body())], [helper.make_tensor("cond", TensorProto.BOOL, [], [True])])
