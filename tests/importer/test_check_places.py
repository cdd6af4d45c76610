"""Where the check's diagnostics point: every field path and offset, verified on the bytes.

Owns `assert_placed`, which the other check tests use: it walks a
diagnostic's field path through the model as `onnx` parsed it (independently
of our reader), and checks that the bytes at the diagnostic's offset are that
field: the key of that field number, then exactly that message or string.
"""

from __future__ import annotations

from typing import Any

import onnx
from onnx import TensorProto, helper
from support.field_places import assert_field_at

from importer import Diagnostic, check_model, load_model_bytes


def assert_placed(data: bytes, model: onnx.ModelProto, diagnostic: Diagnostic) -> None:
    """The bytes at the diagnostic's offset are the field its path names."""
    assert_field_at(data, model, diagnostic.field_path, diagnostic.offset, diagnostic)


def check_bytes(data: bytes) -> list[Diagnostic]:
    with load_model_bytes(data) as model:
        return check_model(model)


# --- the helper's own tests, and placement of each kind of field


def _model(nodes: list[onnx.NodeProto], opset: int = 21, **kwargs: Any) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kwargs)


def test_every_kind_of_place_is_the_field_it_names() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="fine"),
        helper.make_node("Relu", ["x", "x"], ["b"], name="two inputs"),  # input[1]
        helper.make_node("Relu", ["x"], ["c", "c2"], name="two outputs"),  # output[1]
        helper.make_node("LeakyRelu", ["x"], ["d"], name="typed", alpha=2),  # attribute[0] (INT, not FLOAT)
        helper.make_node("NoSuchOp", ["x"], ["e"], name="unknown"),  # op_type
        helper.make_node("Concat", ["x", "x"], ["f"], name="no axis"),  # the node
    ]
    model = _model(nodes)
    data = model.SerializeToString()
    diagnostics = check_bytes(data)
    assert [(d.code, d.field_path) for d in diagnostics] == [
        ("too-many-inputs", "ModelProto.graph.node[1].input[1]"),
        ("too-many-outputs", "ModelProto.graph.node[2].output[1]"),
        ("attribute-type", "ModelProto.graph.node[3].attribute[0]"),
        ("unknown-op", "ModelProto.graph.node[4].op_type"),
        ("missing-attribute", "ModelProto.graph.node[5]"),
    ]
    for diagnostic in diagnostics:
        assert diagnostic.severity == "error"
        assert_placed(data, model, diagnostic)
    offsets = [d.offset for d in diagnostics]
    assert offsets == sorted(offsets)


def test_places_inside_subgraphs_and_functions() -> None:
    then_branch = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Concat", ["t", "t"], ["t2"])],
        "then",
        [],
        [helper.make_tensor_value_info("t2", TensorProto.FLOAT, None)],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["e"], bogus=1)], "else", [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)]
    )
    cond = helper.make_node("Constant", [], ["cond"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True]))
    branch = helper.make_node("If", ["cond"], ["y"], then_branch=then_branch, else_branch=else_branch)
    body = [helper.make_node("Cast", ["p"], ["q"])]  # `to` missing
    function = helper.make_function("local", "F", ["p"], ["q"], body, [helper.make_opsetid("", 21)])
    call = helper.make_node("F", ["y"], ["z"], domain="local")
    graph = helper.make_graph(
        [cond, branch, call],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("local", 1)], functions=[function])
    data = model.SerializeToString()
    diagnostics = check_bytes(data)
    assert {(d.code, d.field_path) for d in diagnostics} == {
        ("missing-attribute", "ModelProto.graph.node[1].attribute[1].g.node[1]"),  # then_branch (make_node sorts by name)
        ("unknown-attribute", "ModelProto.graph.node[1].attribute[0].g.node[0].attribute[0]"),  # else_branch
        ("missing-attribute", "ModelProto.functions[0].node[0]"),
    }
    for diagnostic in diagnostics:
        assert_placed(data, model, diagnostic)
    assert [d.offset for d in diagnostics] == sorted(d.offset for d in diagnostics)


def test_a_diagnostic_describes_its_node_and_has_a_json_form() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["a"], name="relu-7", extra=1.5)])
    (diagnostic,) = check_bytes(model.SerializeToString())
    assert diagnostic.as_dict() == {
        "severity": "error",
        "code": "unknown-attribute",
        "message": "Relu-14 has no attribute 'extra'",
        "node_name": "relu-7",
        "op_type": "Relu",
        "domain": "",
        "field_path": "ModelProto.graph.node[0].attribute[0]",
        "offset": diagnostic.offset,
    }


def test_messages_are_bounded_whatever_the_names() -> None:
    name = "n" * 10_000
    node = helper.make_node("Relu", ["x"], ["a"], name=name)
    node.attribute.append(helper.make_attribute(name, 1))
    model = _model([node])
    (diagnostic,) = check_bytes(model.SerializeToString())
    assert diagnostic.code == "unknown-attribute" and len(diagnostic.message) < 200
    assert diagnostic.node_name == name  # the node's own name is data, not message
