"""The `shape` stage (service/checks/stages/shape.py): onnx's strict inference, each finding at its node.

What a user relies on:

- every declared type or shape that contradicts inference, and every
  inference error, is an error at the node onnx names: its field path (main
  graph, an If's subgraph, a model-local function's body) and the byte
  offset of that node's key in the file, checked here on the bytes;
- generated mutations of the backend models (an output declared with
  another element type, or with one dimension off) are each found at the
  mutated node, and onnx refuses each mutated model too;
- the verdict agrees with `onnx.shape_inference.infer_shapes` (the stage's
  options, strict) on the same file for every backend model and cached
  torch export: no error where onnx passes, an error where it fails;
- what the stage adds to onnx's report is shown right here: setting large
  initializers aside changes no finding (the values inference asks for are
  given back), a tensor of an external data file inference needs is given
  inline (onnx on the model with its data loaded agrees), a node left
  without input type by its producer's failure is a warning onnx reports too;
- without onnx, or when anything unexpected happens, the stage is
  `incomplete` with the reason, never `pass`.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.onnx_cpp2py_export.shape_inference
import onnx.shape_inference
import pytest
from onnx import TensorProto, helper
from support.field_places import LENGTH_DELIMITED, field_at, resolve_path

import service.checks.stages.shape as shape_module
from importer import load_model
from service.checks.outcome import Finding, StageResult, verdict
from service.checks.stages.shape import (
    DECLARED_SHAPE_CONFLICT,
    DECLARED_TYPE_CONFLICT,
    INFERENCE_OPTIONS,
    ONNX_MISSING,
    SHAPE_INFERENCE_ERROR,
    SHAPE_INFERENCE_FOLLOW_ON,
    SHAPE_NOT_INFERRED,
    shape_stage,
)

NODE_CASE_STRIDE = 5  # the mutation sweep takes every fifth backend node case, and every other model
MIN_MUTATIONS = 150
_V = helper.make_tensor_value_info
_OPSET = [helper.make_opsetid("", 21)]


# --- helpers


def _stage_of(path: Path) -> StageResult:
    with load_model(path) as model:
        return shape_stage(model)


def _run(model: onnx.ModelProto, tmp_path: Path, name: str = "model.onnx") -> tuple[bytes, StageResult]:
    data = model.SerializeToString()
    path = tmp_path / name
    path.write_bytes(data)
    return data, _stage_of(path)


def _onnx_error(model: onnx.ModelProto | bytes) -> str | None:
    """onnx's own verdict with the stage's options: its error's text, or None."""
    try:
        onnx.shape_inference.infer_shapes(model, **INFERENCE_OPTIONS)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as error:
        return str(error)
    return None


def assert_at_node(data: bytes, model: onnx.ModelProto, finding: Finding, field_path: str) -> None:
    """The finding names the node at `field_path`, and its offset is that
    node's key in the file: a length-delimited field whose payload is the node."""
    assert finding.field_path == field_path, finding
    _, _, node = resolve_path(model, field_path)
    assert isinstance(node, onnx.NodeProto)
    key, payload = field_at(data, finding.offset)
    assert key & 7 == LENGTH_DELIMITED, finding
    assert onnx.NodeProto.FromString(payload) == node, finding
    assert (finding.node_name, finding.op_type, finding.domain) == (node.name, node.op_type, node.domain)


def _errors(result: StageResult, code: str | None = None) -> list[Finding]:
    return [f for f in result.findings if f.severity == "error" and (code is None or f.code == code)]


def _model(
    nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto], **kwargs: Any
) -> onnx.ModelProto:
    value_info = kwargs.pop("value_info", [])
    initializer = kwargs.pop("initializer", [])
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=initializer, value_info=value_info)
    kwargs.setdefault("opset_imports", _OPSET)
    return helper.make_model(graph, **kwargs)


# --- one finding each, placed


def test_an_add_declared_int64_over_float_inputs_is_a_type_conflict_at_the_add(tmp_path: Path) -> None:
    model = _model(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Add", ["r", "x"], ["y"], name="add")],
        [_V("x", TensorProto.FLOAT, [2, 3])],
        [_V("y", TensorProto.INT64, [2, 3])],
    )
    data, result = _run(model, tmp_path)
    assert _onnx_error(model) is not None
    assert result.status == "fail" and result.errors == 1
    (finding,) = _errors(result, DECLARED_TYPE_CONFLICT)
    assert_at_node(data, model, finding, "ModelProto.graph.node[1]")
    assert "(FLOAT) vs (INT64)" in finding.message


def test_a_wrong_dimension_declared_on_a_matmul_is_a_shape_conflict_at_the_matmul(tmp_path: Path) -> None:
    model = _model(
        [helper.make_node("MatMul", ["a", "b"], ["m"], name="matmul"), helper.make_node("Relu", ["m"], ["y"])],
        [_V("a", TensorProto.FLOAT, [2, 3]), _V("b", TensorProto.FLOAT, [3, 4])],
        [_V("y", TensorProto.FLOAT, None)],
        value_info=[_V("m", TensorProto.FLOAT, [2, 5])],
    )
    data, result = _run(model, tmp_path)
    assert _onnx_error(model) is not None
    (finding,) = _errors(result)
    assert finding.code == DECLARED_SHAPE_CONFLICT
    assert_at_node(data, model, finding, "ModelProto.graph.node[0]")
    assert "dimension 1: (4) vs (5)" in finding.message


def test_a_wrong_type_in_a_subgraph_of_an_if_is_placed_in_the_subgraph(tmp_path: Path) -> None:
    then_branch = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["n"], name="neg"), helper.make_node("Cast", ["n"], ["t"], name="cast", to=TensorProto.FLOAT)],
        "then",
        [],
        [_V("t", TensorProto.FLOAT, [2])],
        value_info=[_V("n", TensorProto.INT32, [2])],
    )
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [_V("e", TensorProto.FLOAT, [2])])
    model = _model(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_branch, else_branch=else_branch),
        ],
        [_V("x", TensorProto.FLOAT, [2]), _V("c", TensorProto.BOOL, [])],
        [_V("y", TensorProto.FLOAT, [2])],
    )
    data, result = _run(model, tmp_path)
    assert _onnx_error(model) is not None
    position = [attribute.name for attribute in model.graph.node[1].attribute].index("then_branch")
    conflicts = _errors(result, DECLARED_TYPE_CONFLICT)
    assert [f.field_path for f in conflicts] == [f"ModelProto.graph.node[1].attribute[{position}].g.node[0]"]
    assert_at_node(data, model, conflicts[0], conflicts[0].field_path)


def test_a_type_error_in_a_function_body_is_placed_in_the_body(tmp_path: Path) -> None:
    body = [
        helper.make_node("Cast", ["a"], ["i"], name="to int", to=TensorProto.INT64),
        helper.make_node("Add", ["i", "a"], ["b"], name="mixed add"),
    ]
    function = helper.make_function("local", "F", ["a"], ["b"], body, _OPSET)
    model = _model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("F", ["r"], ["y"], domain="local", name="call")],
        [_V("x", TensorProto.FLOAT, [2])],
        [_V("y", TensorProto.FLOAT, [2])],
        opset_imports=[*_OPSET, helper.make_opsetid("local", 1)],
        functions=[function],
    )
    data, result = _run(model, tmp_path)
    assert _onnx_error(model) is not None
    errors = _errors(result)
    assert [f.field_path for f in errors] == ["ModelProto.functions[0].node[1]"], errors
    assert errors[0].code == SHAPE_INFERENCE_ERROR
    assert_at_node(data, model, errors[0], "ModelProto.functions[0].node[1]")


def test_every_error_onnx_reports_in_a_graph_is_a_finding(tmp_path: Path) -> None:
    """Strict inference reports each failing node of a graph, not only the first."""
    model = _model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="first"),
            helper.make_node("Neg", ["x"], ["b"], name="fine"),
            helper.make_node("Abs", ["x"], ["c"], name="second"),
        ],
        [_V("x", TensorProto.FLOAT, [2])],
        [_V("a", TensorProto.INT64, [2]), _V("b", TensorProto.FLOAT, [2]), _V("c", TensorProto.FLOAT, [3])],
    )
    data, result = _run(model, tmp_path)
    assert [(f.code, f.field_path) for f in result.findings] == [
        (DECLARED_TYPE_CONFLICT, "ModelProto.graph.node[0]"),
        (DECLARED_SHAPE_CONFLICT, "ModelProto.graph.node[2]"),
    ]
    for finding in result.findings:
        assert_at_node(data, model, finding, finding.field_path)


def test_nameless_and_same_named_nodes_are_told_apart(tmp_path: Path) -> None:
    """onnx names a node only by its name; the stage places each error at its own node."""
    model = _model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="same"),
            helper.make_node("Relu", ["x"], ["b"], name="same"),
            helper.make_node("Neg", ["x"], ["c"]),
        ],
        [_V("x", TensorProto.FLOAT, [2])],
        [_V("a", TensorProto.FLOAT, [2]), _V("b", TensorProto.INT8, [2]), _V("c", TensorProto.INT8, [2])],
    )
    data, result = _run(model, tmp_path)
    assert [f.field_path for f in _errors(result)] == ["ModelProto.graph.node[1]", "ModelProto.graph.node[2]"]
    assert [f.node_name for f in _errors(result)] == ["same", ""]
    for finding in result.findings:
        assert_at_node(data, model, finding, finding.field_path)


def test_an_input_left_without_type_by_a_failed_producer_is_a_follow_on_warning(tmp_path: Path) -> None:
    model = _model(
        [helper.make_node("MatMul", ["a", "b"], ["m"], name="bad matmul"), helper.make_node("Relu", ["m"], ["y"], name="after")],
        [_V("a", TensorProto.FLOAT, [2, 3]), _V("b", TensorProto.FLOAT, [2, 3])],
        [_V("y", TensorProto.FLOAT, None)],
    )
    message = _onnx_error(model)
    assert message is not None and "node name: bad matmul" in message and "node name: after" in message  # onnx reports both
    _, result = _run(model, tmp_path)
    assert [(f.severity, f.code, f.field_path) for f in result.findings] == [
        ("error", SHAPE_INFERENCE_ERROR, "ModelProto.graph.node[0]"),
        ("warning", SHAPE_INFERENCE_FOLLOW_ON, "ModelProto.graph.node[1]"),
    ]
    assert "ModelProto.graph.node[0]" in result.findings[1].message
    assert result.errors == 1 and result.status == "fail"


def test_an_input_without_type_of_its_own_stays_an_error(tmp_path: Path) -> None:
    """No producer failed: the missing type is the model's (a graph input declared without one)."""
    x = onnx.ValueInfoProto(name="x")
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [x], [_V("y", TensorProto.FLOAT, None)])
    assert _onnx_error(model) is not None
    _, result = _run(model, tmp_path)
    assert [(f.severity, f.code, f.field_path) for f in result.findings] == [("error", SHAPE_INFERENCE_ERROR, "ModelProto.graph.node[0]")]


def test_an_op_without_schema_is_a_warning_where_onnx_stops_reporting(tmp_path: Path) -> None:
    """After a node of a custom domain onnx reports no error in that graph;
    the stage says so at that node, and adds no error of its own."""
    model = _model(
        [
            helper.make_node("Mystery", ["x"], ["m"], domain="custom.ops", name="custom"),
            helper.make_node("Relu", ["x"], ["y"], name="relu"),
            helper.make_node("Riddle", ["y"], ["r"], domain="custom.ops", name="custom_too"),
        ],
        [_V("x", TensorProto.FLOAT, [2])],
        [_V("y", TensorProto.INT64, [2]), _V("m", TensorProto.FLOAT, [2])],
        opset_imports=[*_OPSET, helper.make_opsetid("custom.ops", 1)],
    )
    assert _onnx_error(model) is None  # the Relu's conflict is not reported by onnx: nor by us
    data, result = _run(model, tmp_path)
    assert result.status == "pass"
    (warning,) = result.findings
    assert (warning.severity, warning.code) == ("warning", SHAPE_NOT_INFERRED)
    assert "2 node(s)" in warning.message and "(custom.ops:Mystery, custom.ops:Riddle)" in warning.message
    assert_at_node(data, model, warning, "ModelProto.graph.node[0]")


def test_an_error_in_a_function_of_onnx_is_placed_at_the_node_calling_it(tmp_path: Path) -> None:
    """The backend's test_mvn: its MeanVarianceNormalization's own body fails inference in onnx 1.23."""
    model = _model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("MeanVarianceNormalization", ["r"], ["y"], name="mvn")],
        [_V("x", TensorProto.FLOAT, [3, 3, 3, 1])],
        [_V("y", TensorProto.FLOAT, [3, 3, 3, 1])],
        opset_imports=[helper.make_opsetid("", 13)],
        ir_version=7,
    )
    message = _onnx_error(model)
    assert message is not None and "(op_type:Constant)" in message
    data, result = _run(model, tmp_path)
    (finding,) = _errors(result)
    assert_at_node(data, model, finding, "ModelProto.graph.node[1]")
    assert "(op_type:Constant)" in finding.message


def test_errors_collected_before_an_error_that_ends_inference_are_kept(tmp_path: Path) -> None:
    """A type outside an op's constraints (check_type) ends onnx's inference
    at once, dropping the errors it had collected: the stage finds those
    again (onnx without check_type reports them too)."""
    model = _model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="declared wrong"),
            helper.make_node("Cast", ["x"], ["i"], name="to int", to=TensorProto.INT64),
            helper.make_node("Conv", ["x", "w", "i"], ["y"], name="int bias"),
        ],
        [_V("x", TensorProto.FLOAT, [1, 1, 1, 1]), _V("w", TensorProto.FLOAT, [1, 1, 1, 1])],
        [_V("a", TensorProto.INT64, None), _V("y", TensorProto.FLOAT, None)],
    )
    message = _onnx_error(model)
    assert message is not None and "int bias" in message and "declared wrong" not in message
    relaxed = onnx.shape_inference.infer_shapes
    with pytest.raises(onnx.shape_inference.InferenceError, match="node name: declared wrong"):
        relaxed(model, check_type=False, strict_mode=True, data_prop=True)
    data, result = _run(model, tmp_path)
    assert [(f.code, f.field_path) for f in result.findings] == [
        (DECLARED_TYPE_CONFLICT, "ModelProto.graph.node[0]"),
        (SHAPE_INFERENCE_ERROR, "ModelProto.graph.node[2]"),
    ]
    for finding in result.findings:
        assert_at_node(data, model, finding, finding.field_path)


# --- the values inference reads


def _reshape_model(declared: list[int], big: bool) -> onnx.ModelProto:
    """Reshape to (4, 6) by a shape initializer; a large weight beside it when `big`."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [4, 6])
    initializers = [shape]
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape")]
    if big:
        initializers.append(helper.make_tensor("w", TensorProto.FLOAT, [6, 5000], [0.5] * 30000, raw=False))
        nodes.append(helper.make_node("MatMul", ["r", "w"], ["mm"], name="matmul"))
    return _model(
        nodes,
        [_V("x", TensorProto.FLOAT, [2, 12])],
        [_V("r", TensorProto.FLOAT, declared), *([_V("mm", TensorProto.FLOAT, [4, 5000])] if big else [])],
        initializer=initializers,
    )


# --- the types inference gives undeclared values


def test_undeclared_values_get_the_types_onnx_infers_with_symbolic_dimensions_by_name(tmp_path: Path) -> None:
    model = _model(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
            helper.make_node("Relu", ["m"], ["r"], name="relu"),
            helper.make_node("Shape", ["r"], ["s"], name="shape"),
            helper.make_node("Identity", ["r"], ["y"], name="out"),
        ],
        [_V("x", TensorProto.FLOAT, ["batch", 3])],
        [_V("y", TensorProto.FLOAT, ["batch", 4]), _V("s", TensorProto.INT64, None)],
        initializer=[helper.make_tensor("w", TensorProto.FLOAT, [3, 4], np.ones(12, np.float32))],
        value_info=[_V("r", TensorProto.FLOAT, ["batch", 4])],
    )
    _, result = _run(model, tmp_path)
    assert result.status == "pass"
    # declared ones (x, y, r, the initializer w) are the model's own; `s` is declared without a shape
    assert json.loads(result.inferred) == [{"name": "m", "type": {"kind": "tensor", "elem_type": "FLOAT", "shape": ["batch", 4]}}]
    expected = onnx.shape_inference.infer_shapes(model, **INFERENCE_OPTIONS)
    (m_info,) = [v for v in expected.graph.value_info if v.name == "m"]
    assert [d.dim_param or d.dim_value for d in m_info.type.tensor_type.shape.dim] == ["batch", 4]


def test_values_declared_without_a_type_get_the_types_onnx_infers(tmp_path: Path) -> None:
    """A value_info entry or a graph output with a name and no type declares no type: onnx's inferred one is kept."""
    model = _model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Neg", ["r"], ["t"], name="neg"),
            helper.make_node("Abs", ["t"], ["u"], name="abs"),
        ],
        [_V("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_empty_tensor_value_info("u")],
        value_info=[_V("r", TensorProto.FLOAT, ["batch", 3]), helper.make_empty_tensor_value_info("t")],
    )
    _, result = _run(model, tmp_path)
    assert result.status == "pass"
    inferred = {entry["name"]: entry["type"] for entry in json.loads(result.inferred)}
    assert inferred == {name: {"kind": "tensor", "elem_type": "FLOAT", "shape": ["batch", 3]} for name in ("t", "u")}


def test_a_model_that_fails_inference_still_gives_the_types_before_and_around_the_error(tmp_path: Path) -> None:
    model = _model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Add", ["r", "x"], ["a"], name="add"),
            helper.make_node("Identity", ["a"], ["y"], name="out"),
        ],
        [_V("x", TensorProto.FLOAT, [2, 3])],
        [_V("y", TensorProto.INT64, [2, 3])],
    )
    _, result = _run(model, tmp_path)
    assert result.status == "fail"
    inferred = {entry["name"]: entry["type"] for entry in json.loads(result.inferred)}
    assert inferred["r"] == {"kind": "tensor", "elem_type": "FLOAT", "shape": [2, 3]}
    assert inferred["a"]["elem_type"] == "FLOAT"


@pytest.mark.parametrize("declared", [[4, 6], [4, 7]])
def test_setting_initializers_aside_changes_no_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, declared: list[int]) -> None:
    """Every initializer set aside (even Reshape's shape, whose values
    inference reads): the stage gives back what onnx asks for and finds what
    it finds with every value present."""
    model = _reshape_model(declared, big=True)
    expected = _onnx_error(model)
    data, whole = _run(model, tmp_path)
    monkeypatch.setattr(shape_module, "STRIP_BYTES", 1)
    _, set_aside = _run(model, tmp_path, "again.onnx")
    assert [(f.code, f.field_path, f.message) for f in set_aside.findings] == [(f.code, f.field_path, f.message) for f in whole.findings]
    assert (whole.status == "pass") == (expected is None)
    if expected is not None:
        (finding,) = _errors(set_aside, DECLARED_SHAPE_CONFLICT)
        assert_at_node(data, model, finding, "ModelProto.graph.node[0]")


def test_a_shape_tensor_in_an_external_data_file_is_given_inline(tmp_path: Path) -> None:
    """onnx on the file cannot read Reshape's shape from the external file;
    the stage gives it from the importer's view, and agrees with onnx on the
    model with its external data loaded."""
    model = _reshape_model([4, 7], big=False)
    shape = model.graph.initializer[0]
    (tmp_path / "shape.bin").write_bytes(np.array([4, 6], dtype="<i8").tobytes())
    shape.ClearField("int64_data")
    shape.external_data.add(key="location", value="shape.bin")
    shape.data_location = TensorProto.EXTERNAL
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    on_file = _onnx_error(path.read_bytes())
    assert on_file is not None and "Cannot parse data from external tensors" in on_file
    loaded = onnx.load(str(path))  # the external data read in
    assert "differ in dimension 1" in (_onnx_error(loaded) or "")
    result = _stage_of(path)
    (finding,) = _errors(result)
    assert finding.code == DECLARED_SHAPE_CONFLICT and "dimension 1: (6) vs (7)" in finding.message
    assert_at_node(path.read_bytes(), model, finding, "ModelProto.graph.node[0]")


def test_a_model_over_the_protobuf_limit_is_incomplete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shape_module, "PROTOBUF_LIMIT", 100)
    _, result = _run(_reshape_model([4, 6], big=True), tmp_path)
    assert result.status == "incomplete" and "2 GB" in result.reason
    assert verdict([result]) == "incomplete"


# --- failing closed


def test_without_onnx_the_stage_is_incomplete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(_reshape_model([4, 6], big=False).SerializeToString())
    for name in [name for name in sys.modules if name == "onnx" or name.startswith("onnx.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` raises ImportError
    result = _stage_of(path)
    assert (result.status, result.reason, result.findings) == ("incomplete", ONNX_MISSING, [])
    assert verdict([result]) == "incomplete"


def test_an_unexpected_failure_is_incomplete_with_its_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise MemoryError("no memory left for inference")

    monkeypatch.setattr(onnx.onnx_cpp2py_export.shape_inference, "infer_shapes", broken)  # what the stage calls
    _, result = _run(_reshape_model([4, 6], big=False), tmp_path)
    assert result.status == "incomplete"
    assert "MemoryError" in result.reason and "no memory left" in result.reason


# --- the backend models: mutations, and agreement with onnx


def _backend_models(backend_manifest: dict[str, Any], backend_dir: Path, stride: int = 1) -> Iterator[tuple[str, Path]]:
    node_cases = 0
    for relative in backend_manifest["models"]:
        if relative.startswith("node/"):
            node_cases += 1
            if node_cases % stride:
                continue
        yield relative, backend_dir / relative
    exports = backend_dir.parent / "torch-exports"
    for path in sorted(exports.glob("*/model.onnx")):
        yield f"torch-exports/{path.parent.name}", path


def _declared(model: onnx.ModelProto, name: str) -> onnx.TypeProto:
    """The type `name` is declared with in the main graph (added as value_info when it has none)."""
    for info in [*model.graph.output, *model.graph.value_info]:
        if info.name == name:
            found: onnx.TypeProto = info.type
            return found
    added = model.graph.value_info.add()
    added.name = name
    declared: onnx.TypeProto = added.type
    return declared


def _mutations(model: onnx.ModelProto) -> Iterator[tuple[str, str, onnx.ModelProto]]:
    """(code, node field path, mutated model): the first main-graph node
    output of an inferred tensor type declared with another element type,
    and the first with a known dimension declared one larger."""
    inferred = onnx.shape_inference.infer_shapes(model, **INFERENCE_OPTIONS)
    types = {info.name: info.type for info in [*inferred.graph.value_info, *inferred.graph.output]}
    made: set[str] = set()
    for index, node in enumerate(model.graph.node):
        for output in node.output:
            found = types.get(output)
            if found is None or not found.HasField("tensor_type") or not found.tensor_type.elem_type:
                continue
            tensor = found.tensor_type
            if DECLARED_TYPE_CONFLICT not in made:
                mutated = onnx.ModelProto()
                mutated.CopyFrom(model)
                declared = _declared(mutated, output)
                declared.Clear()
                declared.tensor_type.elem_type = TensorProto.INT64 if tensor.elem_type != TensorProto.INT64 else TensorProto.FLOAT
                made.add(DECLARED_TYPE_CONFLICT)
                yield DECLARED_TYPE_CONFLICT, f"ModelProto.graph.node[{index}]", mutated
            known = [i for i, dim in enumerate(tensor.shape.dim) if dim.HasField("dim_value")] if tensor.HasField("shape") else []
            if DECLARED_SHAPE_CONFLICT not in made and known:
                mutated = onnx.ModelProto()
                mutated.CopyFrom(model)
                declared = _declared(mutated, output)
                declared.CopyFrom(found)
                declared.tensor_type.shape.dim[known[0]].dim_value += 1
                made.add(DECLARED_SHAPE_CONFLICT)
                yield DECLARED_SHAPE_CONFLICT, f"ModelProto.graph.node[{index}]", mutated
            if len(made) == 2:
                return


def test_each_generated_mutation_is_found_at_the_mutated_node(
    backend_manifest: dict[str, Any], backend_dir: Path, tmp_path: Path, report: list[str]
) -> None:
    made: Counter[str] = Counter()
    failures: list[str] = []
    for source, path in _backend_models(backend_manifest, backend_dir, NODE_CASE_STRIDE):
        model = onnx.load(str(path))  # external data read in: the mutated copies are self-contained
        if _onnx_error(model) is not None:
            continue  # only models onnx accepts are mutated
        for code, field_path, mutated in _mutations(model):
            if _onnx_error(mutated) is None:
                continue  # the dimension was declared (a graph output's), not inferred: onnx has nothing to compare it with
            made[code] += 1
            data, result = _run(mutated, tmp_path)
            hits = [f for f in _errors(result, code) if f.field_path == field_path]
            if not hits:
                failures.append(f"{source} {code}: nothing at {field_path}; found {[(f.code, f.field_path) for f in result.findings][:4]}")
                continue
            assert_at_node(data, mutated, hits[0], field_path)
    report.append(f"shape mutations: {sum(made.values())} ({', '.join(f'{code} {count}' for code, count in sorted(made.items()))})")
    assert failures == []
    assert min(made[DECLARED_TYPE_CONFLICT], made[DECLARED_SHAPE_CONFLICT]) >= MIN_MUTATIONS, made


# Models where the stage's verdict differs from onnx's on the same file, each with its reason.
KNOWN_DIFFERENCES: dict[str, str] = {}


def test_the_verdict_agrees_with_onnx_on_every_backend_model(
    backend_manifest: dict[str, Any], backend_dir: Path, report: list[str]
) -> None:
    differences: dict[str, str] = {}
    statuses: Counter[str] = Counter()
    onnx_seconds = stage_seconds = 0.0
    for source, path in _backend_models(backend_manifest, backend_dir):
        started = time.perf_counter()
        expected = _onnx_error(path.read_bytes())
        onnx_seconds += time.perf_counter() - started
        started = time.perf_counter()
        result = _stage_of(path)
        stage_seconds += time.perf_counter() - started
        statuses[result.status] += 1
        if result.status == "incomplete" or (result.status == "fail") != (expected is not None):
            found = result.reason or [f.code for f in result.findings][:3]
            differences[source] = f"stage {result.status} ({found}), onnx {'fails' if expected else 'passes'}"
        elif expected is not None:
            assert result.errors >= 1
    report.append(
        f"shape agreement: {sum(statuses.values())} models ({dict(statuses)}), {len(differences)} differences; "
        f"onnx {onnx_seconds:.2f} s, the stage (load included) {stage_seconds:.2f} s"
    )
    assert differences == KNOWN_DIFFERENCES
