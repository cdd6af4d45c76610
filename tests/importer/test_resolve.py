"""Graph resolution (docs/import-rules.md §4) on models written with onnx to disk.

Values and their order, the IR < 4 default-value rule, scopes, captures and
shadowing in subgraphs, reference errors that name the node and the exact
byte of the bad input, opsets, types, the topological order rule with
nodes_were_reordered, consumers, and functions imported as written.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from importer import ErrorKind, ModelImportError, OnnxModel, load_model, load_opened_model, open_model
from importer.graph import GRAPH_INPUT, INITIALIZER, NODE_OUTPUT
from importer.messages import TensorType

F = TensorProto.FLOAT


def _save(tmp_path: Path, nodes: list[onnx.NodeProto], inputs: list[str], outputs: list[str], **graph_fields: object) -> Path:
    opsets = graph_fields.pop("opsets", [helper.make_opsetid("", 21)])
    ir_version = graph_fields.pop("ir_version", 10)
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(name, F, [2]) for name in inputs],
        [helper.make_tensor_value_info(name, F, None) for name in outputs],
        **graph_fields,  # type: ignore[arg-type]
    )
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = ir_version  # type: ignore[assignment]
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _load(path: Path) -> OnnxModel:
    return load_model(path)


def _refusal(path: Path) -> ModelImportError:
    with pytest.raises(ModelImportError) as refused:
        load_model(path)
    return refused.value


def test_nodes_in_topological_order_are_kept(tmp_path: Path) -> None:
    path = _save(tmp_path, [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])], ["x"], ["y"])
    with _load(path) as model:
        assert [n.index for n in model.graph.nodes] == [0, 1]
        assert model.graph.nodes_were_reordered is False


def test_nodes_out_of_order_are_sorted_smallest_file_index_first(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Add", ["b", "c"], ["y"], name="last"),  # 0: needs 2 and 1
        helper.make_node("Relu", ["a"], ["c"]),  # 1: needs 3
        helper.make_node("Relu", ["x"], ["b"]),  # 2: ready
        helper.make_node("Relu", ["x"], ["a"]),  # 3: ready
    ]
    with _load(_save(tmp_path, nodes, ["x"], ["y"])) as model:
        assert [n.index for n in model.graph.nodes] == [2, 3, 1, 0]
        assert model.graph.nodes_were_reordered is True
    dump_order = [n.name for n in onnx.load(tmp_path / "model.onnx").graph.node]
    assert dump_order[0] == "last"  # the file itself is untouched


def test_a_cycle_is_refused_naming_a_node(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="n0"), helper.make_node("Relu", ["a"], ["b"], name="n1")]
    error = _refusal(_save(tmp_path, nodes, ["x"], ["a"]))
    assert error.kind == ErrorKind.INVALID_MODEL
    assert error.field_path == "ModelProto.graph.node[0]"
    assert "cycle" in error.message and "'n0'" in error.message


def test_an_undefined_input_names_the_node_and_the_exact_byte(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Add", ["a", "nowhere"], ["y"], name="adder")]
    path = _save(tmp_path, nodes, ["x"], ["y"])
    error = _refusal(path)
    assert error.kind == ErrorKind.INVALID_MODEL
    assert error.field_path == "ModelProto.graph.node[1].input[1]"
    assert "'adder'" in error.message and "'nowhere'" in error.message
    data = path.read_bytes()
    assert error.offset is not None
    assert data[error.offset : error.offset + 9] == b"\x0a\x07nowhere"


def test_a_model_read_without_resolving_resolves_when_its_graph_is_first_asked_for(tmp_path: Path) -> None:
    """`resolve=False` (the check worker's read): the same graph, or the same refusal, at the first `model.graph`."""
    nodes = [helper.make_node("Relu", ["a"], ["y"]), helper.make_node("Relu", ["x"], ["a"])]
    with load_opened_model(open_model(_save(tmp_path, nodes, ["x"], ["y"])), resolve=False) as model:
        assert model.proto.graph is not None and len(model.proto.graph.node) == 2
        assert [n.index for n in model.graph.nodes] == [1, 0] and model.graph is model.graph
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Add", ["a", "nowhere"], ["y"], name="adder")]
    path = _save(tmp_path, nodes, ["x"], ["y"])
    eager = _refusal(path)
    with load_opened_model(open_model(path), resolve=False) as model, pytest.raises(ModelImportError) as refused:
        model.graph  # noqa: B018 (the property resolves)
    lazy = refused.value
    assert (lazy.kind, lazy.field_path, lazy.offset, lazy.message) == (eager.kind, eager.field_path, eager.offset, eager.message)


def test_an_undefined_graph_output_is_refused(tmp_path: Path) -> None:
    error = _refusal(_save(tmp_path, [helper.make_node("Relu", ["x"], ["a"])], ["x"], ["missing"]))
    assert (error.kind, error.field_path) == (ErrorKind.INVALID_MODEL, "ModelProto.graph.output[0]")


def test_a_value_defined_twice_is_refused(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["x"], ["a"])]
    error = _refusal(_save(tmp_path, nodes, ["x"], ["a"]))
    assert (error.kind, error.field_path) == (ErrorKind.INVALID_MODEL, "ModelProto.graph.node[1].output[0]")


def test_initializer_listed_as_input_is_the_inputs_default(tmp_path: Path) -> None:
    weight = helper.make_tensor("w", F, [2], [1.0, 2.0])
    extra = helper.make_tensor("k", F, [1], [3.0])
    path = _save(tmp_path, [helper.make_node("Add", ["x", "w"], ["y"])], ["x", "w"], ["y"], initializer=[weight, extra], ir_version=3)
    with _load(path) as model:
        values = model.graph.values
        assert values["w"].kind == GRAPH_INPUT
        assert values["w"].initializer is not None and values["w"].initializer.name == "w"
        assert values["k"].kind == INITIALIZER
        assert values["k"].type == TensorType(F, (1,))  # type from the tensor itself
        assert [v.name for v in model.graph.inputs] == ["x", "w"]


def test_an_initializer_defined_twice_is_refused(tmp_path: Path) -> None:
    tensors = [helper.make_tensor("w", F, [1], [1.0]), helper.make_tensor("w", F, [1], [2.0])]
    error = _refusal(_save(tmp_path, [helper.make_node("Relu", ["w"], ["y"])], [], ["y"], initializer=tensors))
    assert (error.kind, error.field_path) == (ErrorKind.INVALID_MODEL, "ModelProto.graph.initializer[1]")


def _if_model(tmp_path: Path, then_reads: str, nested: bool = False) -> Path:
    then_nodes = [helper.make_node("Relu", [then_reads], ["t"])]
    if nested:  # a Loop-free nesting: an If inside the then-branch that reads the outermost value
        inner = helper.make_graph([helper.make_node("Neg", ["x"], ["i"])], "inner", [], [helper.make_tensor_value_info("i", F, None)])
        then_nodes = [helper.make_node("If", ["cond"], ["t"], then_branch=inner, else_branch=inner)]
    then_graph = helper.make_graph(then_nodes, "then", [], [helper.make_tensor_value_info("t", F, None)])
    else_graph = helper.make_graph([helper.make_node("Neg", ["a"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, None)])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [2]), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", F, None)],
    )
    path = tmp_path / "if.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    return path


def test_subgraphs_see_outer_values_and_record_captures(tmp_path: Path) -> None:
    with _load(_if_model(tmp_path, then_reads="a")) as model:
        _relu, if_node = model.graph.nodes
        branches = dict(if_node.subgraphs)
        assert sorted(branches) == ["else_branch", "then_branch"]
        then_graph, else_graph = branches["then_branch"], branches["else_branch"]
        a = model.graph.values["a"]
        assert then_graph.captures == [a] and else_graph.captures == [a]
        assert then_graph.parent is model.graph
        assert a.consumers == [if_node]  # the If reads what its branches read
        assert then_graph.path == "ModelProto.graph.node[1].attribute[1].g"  # make_node sorts: else_branch first


def test_captures_cross_every_level_up_to_the_defining_graph(tmp_path: Path) -> None:
    with _load(_if_model(tmp_path, then_reads="a", nested=True)) as model:
        x = model.graph.values["x"]
        _, if_node = model.graph.nodes
        then_graph = dict(if_node.subgraphs)["then_branch"]
        inner = dict(then_graph.nodes[0].subgraphs)["then_branch"]
        assert x in inner.captures and x in then_graph.captures
        assert if_node in x.consumers
        # the outer If now depends on x, so it still comes after nothing it needs
        assert [n.index for n in model.graph.nodes] == [0, 1]


def test_a_subgraph_reading_an_undefined_name_is_refused(tmp_path: Path) -> None:
    error = _refusal(_if_model(tmp_path, then_reads="ghost"))
    assert error.kind == ErrorKind.INVALID_MODEL
    assert error.field_path == "ModelProto.graph.node[1].attribute[1].g.node[0].input[0]"


def test_names_defined_in_a_subgraph_shadow_outer_names(tmp_path: Path) -> None:
    body = helper.make_graph(
        [helper.make_node("Relu", ["a"], ["b"])],
        "body",
        [helper.make_tensor_value_info("a", F, [2])],  # shadows the outer "a"
        [helper.make_tensor_value_info("b", F, None)],
    )
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Custom", ["a"], ["y"], domain="d", body=body)]
    path = _save(tmp_path, nodes, ["x"], ["y"], opsets=[helper.make_opsetid("", 21), helper.make_opsetid("d", 1)])
    with _load(path) as model:
        sub = model.graph.nodes[1].subgraphs[0][1]
        assert sub.captures == []
        assert sub.nodes[0].inputs[0] is sub.values["a"]


def test_the_empty_domain_and_ai_onnx_are_one_domain(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], domain="ai.onnx")]
    with _load(_save(tmp_path, nodes, ["x"], ["y"], opsets=[helper.make_opsetid("", 19)])) as model:
        assert model.graph.nodes[0].opset_version == 19
        assert model.opsets == {"": 19}


def test_a_domain_that_is_not_imported_is_refused(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], domain="com.nowhere")]
    error = _refusal(_save(tmp_path, nodes, ["x"], ["y"]))
    assert (error.kind, error.field_path) == (ErrorKind.INVALID_MODEL, "ModelProto.graph.node[0].domain")


@pytest.mark.parametrize(("second", "accepted"), [(21, True), (18, False)])
def test_a_domain_imported_twice(tmp_path: Path, second: int, accepted: bool) -> None:
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx", second)]
    path = _save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], ["x"], ["y"], opsets=opsets)
    if accepted:
        _load(path).close()
    else:
        error = _refusal(path)
        assert (error.kind, error.field_path) == (ErrorKind.INVALID_MODEL, "ModelProto.opset_import[1]")


def test_types_come_from_declarations_then_value_info(tmp_path: Path) -> None:
    value_info = [
        helper.make_tensor_value_info("a", TensorProto.INT64, [3]),
        helper.make_tensor_value_info("x", TensorProto.INT8, [9]),  # x is declared as input: ignored
        helper.make_tensor_value_info("ghost", F, [1]),  # not defined: ignored
    ]
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    with _load(_save(tmp_path, nodes, ["x"], ["y"], value_info=value_info)) as model:
        values = model.graph.values
        assert values["x"].type == TensorType(F, (2,))
        assert values["a"].type == TensorType(TensorProto.INT64, (3,))
        assert values["y"].type == TensorType(F, None)  # from the output declaration: unknown rank
        assert values["a"].kind == NODE_OUTPUT and values["a"].producer is model.graph.nodes[0]
        assert "ghost" not in values


def test_consumers_are_in_resolved_order_each_once(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Add", ["a", "a"], ["y"], name="late"),
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Neg", ["a"], ["z"], name="early"),
    ]
    with _load(_save(tmp_path, nodes, ["x"], ["y", "z"])) as model:
        assert [n.name for n in model.graph.values["a"].consumers] == ["late", "early"]
        assert [n.index for n in model.graph.nodes] == [1, 0, 2]


def test_omitted_optional_inputs_give_no_value(tmp_path: Path) -> None:
    with _load(_save(tmp_path, [helper.make_node("Clip", ["x", "", ""], ["y"])], ["x"], ["y"])) as model:
        assert model.graph.nodes[0].inputs[1:] == [None, None]


def test_functions_are_imported_as_written_and_not_resolved(tmp_path: Path) -> None:
    body = [helper.make_node("Add", ["x", "undefined_inside"], ["y"])]  # bodies are not resolved
    function = helper.make_function("local", "F", ["x"], ["y"], body, [helper.make_opsetid("", 21)], ["alpha"])
    path = _save(tmp_path, [helper.make_node("F", ["x"], ["y"], domain="local")], ["x"], ["y"],
                 opsets=[helper.make_opsetid("", 21), helper.make_opsetid("local", 1)])  # fmt: skip
    model = onnx.load(path)
    model.functions.append(function)
    onnx.save(model, path)
    with _load(path) as imported:
        (ours,) = imported.functions
        assert (ours.domain, ours.name, ours.input, ours.output, ours.attribute) == ("local", "F", ["x"], ["y"], ["alpha"])
        assert [n.op_type for n in ours.node] == ["Add"]
        assert imported.graph.nodes[0].opset_version == 1
