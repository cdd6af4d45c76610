"""The `security` stage on small models written to disk: what it flags, where, and that it fails closed.

Each model is made with onnx's helper, written into tmp_path and read back
with `importer.load_model`, as the service reads an upload. A finding's place
is checked on the bytes: the key at its offset is the key of the field its
path names (walked through the model as onnx parsed it), and the payload is
that field. The denial-of-service models (`Range`, `ConstantOfShape`,
`Expand`, ..., a `Loop` of 10^15 trips) are flagged past the bound and not
under it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.field_places import assert_field_at
from support.loop_models import (
    ENDLESS_TRIPS,
    INT64_MAX,
    constant_loop,
    graph_of_loop,
    loop_body,
    loop_node,
    trips_and_true,
    while_loop,
)
from support.training_info_model import FIELD_PATH as TRAINING_FIELD_PATH
from support.training_info_model import training_info_model

import importer
from importer import ErrorKind, ModelImportError
from service.checks.outcome import Finding, StageResult
from service.checks.stages import security
from service.checks.stages.security import LOOP_TRIP_COUNT, SecurityBounds, security_stage, static_findings

FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64


# --- helpers


def _model(
    nodes: list[onnx.NodeProto],
    *,
    inputs: list[onnx.ValueInfoProto] | None = None,
    outputs: list[str] | None = None,
    initializers: list[onnx.TensorProto] | None = None,
    opsets: dict[str, int] | None = None,
    **kwargs: Any,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        inputs or [],
        [helper.make_tensor_value_info(name, FLOAT, None) for name in (outputs or [nodes[-1].output[0]])],
        initializer=initializers or [],
    )
    imports = [helper.make_opsetid(domain, version) for domain, version in (opsets or {"": 21}).items()]
    return helper.make_model(graph, opset_imports=imports, **kwargs)


def _scalar(name: str, value: float, data_type: int = FLOAT) -> onnx.TensorProto:
    return helper.make_tensor(name, data_type, [], [value])


def _ints(name: str, values: list[int]) -> onnx.TensorProto:
    return helper.make_tensor(name, INT64, [len(values)], values)


def _const(output: str, tensor: onnx.TensorProto) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [output], value=tensor)


def _write(tmp_path: Path, model: onnx.ModelProto, name: str = "model.onnx") -> tuple[Path, bytes]:
    data = model.SerializeToString()
    path = tmp_path / name
    path.write_bytes(data)
    return path, data


def _stage(path: Path, bounds: SecurityBounds | None = None) -> StageResult:
    with importer.load_model(path) as model:
        return security_stage(model, bounds or SecurityBounds())


def _codes(result: StageResult) -> list[tuple[str, str, str]]:
    return [(f.code, f.severity, f.field_path) for f in result.findings]


def assert_placed(data: bytes, finding: Finding) -> None:
    """The bytes at the finding's offset are the field its path names: that
    field's key, then exactly its message or string."""
    assert_field_at(data, onnx.ModelProto.FromString(data), finding.field_path, finding.offset, finding)


# --- outputs whose size constants fix


def range_model(limit: float) -> onnx.ModelProto:
    """One Range node over constant scalars: float32 0, `limit`, 1."""
    nodes = [_const("s", _scalar("s", 0.0)), _const("l", _scalar("l", limit)), _const("d", _scalar("d", 1.0))]
    return _model([*nodes, helper.make_node("Range", ["s", "l", "d"], ["y"])])


def test_the_range_model_asking_for_17_gb_is_flagged_at_its_node(tmp_path: Path) -> None:
    path, data = _write(tmp_path, range_model(4.3e9))
    assert len(data) < 200  # a file of a few bytes
    result = _stage(path)
    assert result.status == "fail"
    assert _codes(result) == [("static-output-too-large", "error", "ModelProto.graph.node[3]")]
    finding = result.findings[0]
    assert (finding.op_type, finding.domain) == ("Range", "")
    assert_placed(data, finding)
    # float32 rounds 4.3e9 to 4300000256: that many elements of 4 bytes
    assert "4300000256 float elements (17.2 GB)" in finding.message
    assert "more than the 1 GiB allowed" in finding.message


def test_the_same_range_under_the_bound_is_not_flagged(tmp_path: Path) -> None:
    small, _ = _write(tmp_path, range_model(1000.0), "small.onnx")
    assert _stage(small).findings == []
    assert _stage(small).status == "pass"
    big, _ = _write(tmp_path, range_model(4.3e9), "big.onnx")
    assert _stage(big, SecurityBounds(max_static_output=20 * 10**9)).findings == []  # the bound is the caller's


def test_an_int64_range_of_2_to_the_62_is_estimated_not_made(tmp_path: Path) -> None:
    nodes = [
        _const("s", _scalar("s", 0, INT64)),
        _const("l", _scalar("l", 2**62, INT64)),
        _const("d", _scalar("d", 1, INT64)),
        helper.make_node("Range", ["s", "l", "d"], ["y"]),
    ]
    path, _ = _write(tmp_path, _model(nodes))
    result = _stage(path)
    assert _codes(result) == [("static-output-too-large", "error", "ModelProto.graph.node[3]")]
    assert f"{2**62} int64 elements" in result.findings[0].message


def constant_of_shape_model(dims: list[int]) -> onnx.ModelProto:
    return _model([_const("shape", _ints("shape", dims)), helper.make_node("ConstantOfShape", ["shape"], ["y"])])


def test_constant_of_shape_with_a_huge_constant_shape_is_flagged(tmp_path: Path) -> None:
    path, data = _write(tmp_path, constant_of_shape_model([100_000, 100_000]))
    result = _stage(path)
    assert _codes(result) == [("static-output-too-large", "error", "ModelProto.graph.node[1]")]
    assert "ConstantOfShape would produce 10000000000 float elements (40.0 GB)" in result.findings[0].message
    assert_placed(data, result.findings[0])
    small, _ = _write(tmp_path, constant_of_shape_model([1000, 1000]), "small.onnx")
    assert _stage(small).findings == []


def test_a_shape_folded_from_constants_through_unsqueeze_concat_and_cast_is_followed(tmp_path: Path) -> None:
    nodes = [
        _const("a", _ints("a", [50_000])),
        _const("b", _scalar("b", 50_000.0)),
        helper.make_node("Cast", ["b"], ["b64"], to=INT64),
        _const("axes", _ints("axes", [0])),
        helper.make_node("Unsqueeze", ["b64", "axes"], ["b1"]),
        helper.make_node("Concat", ["a", "b1"], ["shape"], axis=0),
        helper.make_node("ConstantOfShape", ["shape"], ["y"], value=helper.make_tensor("v", TensorProto.DOUBLE, [1], [0.0])),
    ]
    path, _ = _write(tmp_path, _model(nodes))
    result = _stage(path)
    assert _codes(result) == [("static-output-too-large", "error", "ModelProto.graph.node[6]")]
    assert "2500000000 double elements (20.0 GB)" in result.findings[0].message


def test_a_shape_read_off_a_declared_static_input_is_followed(tmp_path: Path) -> None:
    """Shape -> Mul by a constant -> ConstantOfShape: the size follows from the declared input's static shape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        _const("k", _ints("k", [1000])),
        helper.make_node("Mul", ["s", "k"], ["s2"]),
        helper.make_node("ConstantOfShape", ["s2"], ["y"]),
    ]
    inputs = [helper.make_tensor_value_info("x", FLOAT, [1000, 1000])]
    path, _ = _write(tmp_path, _model(nodes, inputs=inputs))
    assert _codes(_stage(path)) == [("static-output-too-large", "error", "ModelProto.graph.node[3]")]


def expand_model(dims: list[int], data_shape: list[int | str]) -> onnx.ModelProto:
    nodes = [_const("shape", _ints("shape", dims)), helper.make_node("Expand", ["x", "shape"], ["y"])]
    return _model(nodes, inputs=[helper.make_tensor_value_info("x", FLOAT, data_shape)])


def test_expand_to_a_huge_constant_shape_is_flagged(tmp_path: Path) -> None:
    path, data = _write(tmp_path, expand_model([100_000, 100_000], [1]))
    result = _stage(path)
    assert _codes(result) == [("static-output-too-large", "error", "ModelProto.graph.node[1]")]
    assert "Expand would produce 10000000000 float elements (40.0 GB)" in result.findings[0].message
    assert_placed(data, result.findings[0])
    small, _ = _write(tmp_path, expand_model([100, 100], [1]), "small.onnx")
    assert _stage(small).findings == []


def test_expand_of_an_input_of_unknown_shape_is_flagged_as_a_lower_bound(tmp_path: Path) -> None:
    path, _ = _write(tmp_path, expand_model([100_000, 100_000], ["N"]))
    result = _stage(path)
    assert _codes(result) == [("static-output-too-large", "error", "ModelProto.graph.node[1]")]
    assert "at least 10000000000 float elements" in result.findings[0].message


def _amplifier(op: str, big: bool) -> onnx.ModelProto:
    """One amplifying op on a declared static input, its constants asking for much (`big`) or little."""
    x = [helper.make_tensor_value_info("x", FLOAT, [1000, 1000])]
    if op == "Tile":
        reps = [1000, 1000] if big else [2, 2]
        return _model([_const("r", _ints("r", reps)), helper.make_node("Tile", ["x", "r"], ["y"])], inputs=x)
    if op == "Pad":
        pads = [100_000] * 4 if big else [1] * 4
        return _model([_const("p", _ints("p", pads)), helper.make_node("Pad", ["x", "p"], ["y"])], inputs=x)
    if op == "Resize":
        image = [helper.make_tensor_value_info("x", FLOAT, [1, 3, 224, 224])]
        scales = helper.make_tensor("sc", FLOAT, [4], [1, 1, 1000, 1000] if big else [1, 1, 2, 2])
        return _model([_const("sc", scales), helper.make_node("Resize", ["x", "", "sc"], ["y"])], inputs=image)
    if op == "OneHot":
        indices = [helper.make_tensor_value_info("i", INT64, [1000])]
        depth = _scalar("depth", 10_000_000 if big else 10, INT64)
        values = helper.make_tensor("v", FLOAT, [2], [0, 1])
        nodes = [_const("depth", depth), _const("v", values), helper.make_node("OneHot", ["i", "depth", "v"], ["y"])]
        return _model(nodes, inputs=indices)
    if op == "MatMul":
        side = 50_000 if big else 500
        column = numpy_helper.from_array(np.ones((side, 1), np.float32), "a")
        row = numpy_helper.from_array(np.ones((1, side), np.float32), "b")
        return _model([helper.make_node("MatMul", ["a", "b"], ["y"])], initializers=[column, row])
    if op == "RandomNormal":
        shape = [100_000, 100_000] if big else [10, 10]
        return _model([helper.make_node("RandomNormal", [], ["y"], shape=shape)])
    if op == "Reshape":
        target = [100_000, 100_000] if big else [10, 10]
        nodes = [_const("t", _ints("t", target)), helper.make_node("Reshape", ["x", "t"], ["y"])]
        return _model(nodes, inputs=[helper.make_tensor_value_info("x", FLOAT, ["N"])])
    raise AssertionError(op)


AMPLIFIERS = ["Tile", "Pad", "Resize", "OneHot", "MatMul", "RandomNormal", "Reshape"]


@pytest.mark.parametrize("op", AMPLIFIERS)
def test_each_amplifying_op_is_flagged_past_the_bound_and_not_under_it(tmp_path: Path, op: str) -> None:
    path, data = _write(tmp_path, _amplifier(op, big=True), "big.onnx")
    result = _stage(path)
    flagged = [f for f in result.findings if f.code == "static-output-too-large"]
    assert [(f.op_type, f.severity) for f in flagged] == [(op, "error")]
    assert flagged[0].message.startswith(f"{op} would produce ")
    assert_placed(data, flagged[0])
    small, _ = _write(tmp_path, _amplifier(op, big=False), "small.onnx")
    assert _stage(small).findings == []


def test_a_range_inside_a_subgraph_and_one_inside_a_function_are_flagged_at_their_places(tmp_path: Path) -> None:
    limit = _scalar("l", 4.3e9)
    branch = helper.make_graph(
        [
            _const("s", _scalar("s", 0.0)),
            _const("l", limit),
            _const("d", _scalar("d", 1.0)),
            helper.make_node("Range", ["s", "l", "d"], ["t"]),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("t", FLOAT, None)],
    )
    other = helper.make_graph([_const("e", _ints("e", [1]))], "else", [], [helper.make_tensor_value_info("e", INT64, None)])
    body = [_const("shape", _ints("shape", [100_000, 100_000])), helper.make_node("ConstantOfShape", ["shape"], ["q"])]
    function = helper.make_function("local", "Fill", ["p"], ["q"], body, [helper.make_opsetid("", 21)])
    nodes = [
        _const("c", helper.make_tensor("c", TensorProto.BOOL, [], [True])),
        helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other),
        helper.make_node("Fill", ["y"], ["z"], domain="local"),
    ]
    model = _model(nodes, opsets={"": 21, "local": 1}, functions=[function])
    path, data = _write(tmp_path, model)
    result = _stage(path)
    assert sorted(_codes(result)) == [
        ("static-output-too-large", "error", "ModelProto.functions[0].node[1]"),
        ("static-output-too-large", "error", "ModelProto.graph.node[1].attribute[1].g.node[3]"),  # then_branch (sorted by name)
    ]
    for finding in result.findings:
        assert_placed(data, finding)
    assert [f.offset for f in result.findings] == sorted(f.offset for f in result.findings)


def test_a_sparse_initializer_that_densifies_past_the_bound_is_flagged(tmp_path: Path) -> None:
    values = helper.make_tensor("w", FLOAT, [1], [1.0])
    indices = helper.make_tensor("w_indices", INT64, [1], [5])
    sparse = helper.make_sparse_tensor(values, indices, [100_000, 100_000])
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [], [helper.make_tensor_value_info("y", FLOAT, None)])
    graph.sparse_initializer.append(sparse)
    path, data = _write(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    result = _stage(path)
    assert _codes(result) == [("static-output-too-large", "error", "ModelProto.graph.sparse_initializer[0]")]
    assert "densifies to 10000000000 float elements (40.0 GB)" in result.findings[0].message
    assert_placed(data, result.findings[0])


def test_a_loop_with_a_constant_trip_count_and_a_scan_output_is_flagged(tmp_path: Path) -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]), _const("row", helper.make_tensor("row", FLOAT, [1000], [0.0] * 1000))],
        "body",
        [helper.make_tensor_value_info("i", INT64, []), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("row", FLOAT, [1000])],
    )
    nodes = [
        _const("m", _scalar("m", 10_000_000, INT64)),
        _const("c", helper.make_tensor("c", TensorProto.BOOL, [], [True])),
        helper.make_node("Loop", ["m", "c"], ["rows"], body=body),
    ]
    path, _ = _write(tmp_path, _model(nodes))
    result = _stage(path)
    assert _codes(result) == [
        ("static-output-too-large", "error", "ModelProto.graph.node[2]"),
        ("loop-trip-count", "error", "ModelProto.graph.node[2]"),  # 10^7 iterations, past the 10^6 allowed
    ]
    assert "10000000000 float elements (40.0 GB) over 10000000 iterations" in result.findings[0].message


def test_static_findings_are_what_the_check_worker_refuses_to_run(tmp_path: Path) -> None:
    big, _ = _write(tmp_path, range_model(4.3e9), "big.onnx")
    with importer.load_model(big) as model:
        assert [(f.code, f.field_path) for f in static_findings(model, SecurityBounds())] == [
            ("static-output-too-large", "ModelProto.graph.node[3]")
        ]
        assert static_findings(model, SecurityBounds(max_static_output=1 << 40)) == []
    small, _ = _write(tmp_path, range_model(1000.0), "small.onnx")
    with importer.load_model(small) as model:
        assert static_findings(model, SecurityBounds()) == []
    endless, _ = _write(tmp_path, constant_loop(), "endless.onnx")
    with importer.load_model(endless) as model:
        assert [(f.code, f.severity) for f in static_findings(model, SecurityBounds())] == [(LOOP_TRIP_COUNT, "error")]


def test_a_declared_input_a_smoke_run_would_have_to_make_past_the_bound_is_a_warning(tmp_path: Path) -> None:
    inputs = [helper.make_tensor_value_info("x", FLOAT, [100_000, 100_000, "N"])]  # N taken as 1
    path, data = _write(tmp_path, _model([helper.make_node("Relu", ["x"], ["y"])], inputs=inputs))
    result = _stage(path)
    assert result.status == "pass"  # a warning: a registry reviews it
    assert _codes(result) == [("static-input-too-large", "warning", "ModelProto.graph.input[0]")]
    assert_placed(data, result.findings[0])
    with importer.load_model(path) as model:
        assert [f.code for f in static_findings(model, SecurityBounds())] == ["static-input-too-large"]


# --- external data


def _external_model(location: str) -> onnx.ModelProto:
    weight = helper.make_tensor("w", FLOAT, [4], [0.0] * 4)
    weight.ClearField("float_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    return _model([helper.make_node("Identity", ["w"], ["y"])], initializers=[weight])


# --- loops whose constant trip count is past the bound


def test_a_loop_of_10_15_trips_that_nothing_ends_sooner_is_an_error_at_its_node(tmp_path: Path) -> None:
    path, data = _write(tmp_path, constant_loop())
    assert len(data) < 300  # a file of a few bytes
    result = _stage(path)
    assert result.status == "fail"
    assert _codes(result) == [(LOOP_TRIP_COUNT, "error", "ModelProto.graph.node[0]")]
    finding = result.findings[0]
    assert (finding.node_name, finding.op_type, finding.domain) == ("loop", "Loop", "")
    assert "1,000,000,000,000,000 iterations" in finding.message and "--max-loop-trips" in finding.message
    assert_placed(data, finding)


def test_the_trip_count_may_come_from_a_constant_node_and_the_condition_may_be_constant_in_the_body(tmp_path: Path) -> None:
    count = helper.make_node("Constant", [], ["count"], value=helper.make_tensor("count", INT64, [], [ENDLESS_TRIPS]))
    model = graph_of_loop([count, loop_node(loop_body("true"), trips="count")], trips_and_true(1))
    path, data = _write(tmp_path, model)
    result = _stage(path)
    assert _codes(result) == [(LOOP_TRIP_COUNT, "error", "ModelProto.graph.node[1]")]
    assert_placed(data, result.findings[0])


def test_a_loop_without_trip_count_or_condition_never_ends_and_is_an_error(tmp_path: Path) -> None:
    path, _ = _write(tmp_path, graph_of_loop([loop_node(loop_body(), trips="", condition="")], []))
    result = _stage(path)
    assert _codes(result) == [(LOOP_TRIP_COUNT, "error", "ModelProto.graph.node[0]")]
    assert "never ends" in result.findings[0].message


def test_a_while_loop_whose_body_computes_its_condition_is_a_warning(tmp_path: Path) -> None:
    path, data = _write(tmp_path, while_loop(10))  # M = INT64_MAX, as torch exports a while-loop
    result = _stage(path)
    assert result.status == "pass"  # a warning: a registry reviews it, and the smoke run's budget bounds it
    assert _codes(result) == [(LOOP_TRIP_COUNT, "warning", "ModelProto.graph.node[0]")]
    assert f"{INT64_MAX:,}" in result.findings[0].message and "--smoke-cpu-seconds" in result.findings[0].message
    assert_placed(data, result.findings[0])


def test_a_condition_given_as_a_graph_input_may_end_the_loop_sooner(tmp_path: Path) -> None:
    condition = helper.make_tensor_value_info("go", TensorProto.BOOL, [])
    model = graph_of_loop([loop_node(loop_body(), condition="go")], trips_and_true(ENDLESS_TRIPS), extra_inputs=[condition])
    path, _ = _write(tmp_path, model)
    assert _codes(_stage(path)) == [(LOOP_TRIP_COUNT, "warning", "ModelProto.graph.node[0]")]


def test_loops_at_or_under_the_bound_and_loops_of_unknown_trip_count_are_not_flagged(tmp_path: Path) -> None:
    path, _ = _write(tmp_path, constant_loop(5), "five.onnx")
    assert _stage(path).findings == []
    path, _ = _write(tmp_path, constant_loop(1000), "thousand.onnx")
    assert _stage(path, SecurityBounds(max_loop_trips=1000)).findings == []
    assert _codes(_stage(path, SecurityBounds(max_loop_trips=999))) == [(LOOP_TRIP_COUNT, "error", "ModelProto.graph.node[0]")]
    given = graph_of_loop(
        [loop_node(loop_body(), trips="n")], trips_and_true(1), extra_inputs=[helper.make_tensor_value_info("n", INT64, [])]
    )
    path, _ = _write(tmp_path, given, "given.onnx")
    assert _stage(path).findings == []  # the caller's trip count: the smoke run's budget bounds it


def test_a_loop_inside_a_subgraph_and_one_inside_a_function_are_found_at_their_places(tmp_path: Path) -> None:
    # the branch's Loop takes its M, cond and v0 from the outer graph
    branch = helper.make_graph([loop_node(loop_body())], "then", [], [helper.make_tensor_value_info("v", FLOAT, [])])
    other = helper.make_graph([helper.make_node("Identity", ["v0"], ["w"])], "else", [], [helper.make_tensor_value_info("w", FLOAT, [])])
    choose = helper.make_node("If", ["flag"], ["v"], then_branch=branch, else_branch=other)
    nested = graph_of_loop(
        [choose], trips_and_true(ENDLESS_TRIPS), extra_inputs=[helper.make_tensor_value_info("flag", TensorProto.BOOL, [])]
    )
    path, data = _write(tmp_path, nested, "nested.onnx")
    result = _stage(path)
    then_branch = "ModelProto.graph.node[0].attribute[1].g"  # the attributes are sorted: else_branch, then_branch
    assert _codes(result) == [(LOOP_TRIP_COUNT, "error", f"{then_branch}.node[0]")]
    assert_placed(data, result.findings[0])

    count = helper.make_node("Constant", [], ["M"], value=helper.make_tensor("M", INT64, [], [ENDLESS_TRIPS]))
    true = helper.make_node("Constant", [], ["cond"], value=helper.make_tensor("cond", TensorProto.BOOL, [], [True]))
    function = helper.make_function("local", "spin", ["v0"], ["v"], [count, true, loop_node(loop_body())], [helper.make_opsetid("", 17)])
    calling = graph_of_loop([helper.make_node("spin", ["v0"], ["v"], domain="local")], [])
    calling.functions.append(function)
    calling.opset_import.append(helper.make_opsetid("local", 1))
    path, data = _write(tmp_path, calling, "function.onnx")
    result = _stage(path)
    assert _codes(result) == [(LOOP_TRIP_COUNT, "error", "ModelProto.functions[0].node[2]")]
    assert_placed(data, result.findings[0])


def test_the_memory_address_marker_in_an_external_data_location_is_flagged(tmp_path: Path) -> None:
    marker = "*/_ORT_MEM_ADDR_/*"
    (tmp_path / "*" / "_ORT_MEM_ADDR_").mkdir(parents=True)
    (tmp_path / "*" / "_ORT_MEM_ADDR_" / "*").write_bytes(bytes(16))  # a file of that name: the importer accepts it
    path, data = _write(tmp_path, _external_model(marker))
    result = _stage(path)
    assert result.status == "fail"
    assert _codes(result) == [("external-data-memory-address", "error", "ModelProto.graph.initializer[0].external_data[0]")]
    assert_placed(data, result.findings[0])
    (tmp_path / "weights.bin").write_bytes(bytes(16))
    plain, _ = _write(tmp_path, _external_model("weights.bin"), "plain.onnx")
    assert _stage(plain).findings == []


def test_locations_the_importer_refuses_never_reach_the_stage(tmp_path: Path) -> None:
    (tmp_path / "inner").mkdir()
    for location in ("../secret.bin", "/etc/passwd", "a/../../b"):
        path, _ = _write(tmp_path / "inner", _external_model(location))
        with pytest.raises(ModelImportError) as refused:
            importer.load_model(path)
        assert refused.value.kind is ErrorKind.EXTERNAL_DATA
        assert refused.value.field_path == "ModelProto.graph.initializer[0]"


# --- training_info: checked like the graph


def test_a_training_info_location_the_importer_refuses_never_reaches_the_stage(tmp_path: Path) -> None:
    path, _ = _write(tmp_path, training_info_model("/etc/passwd"))
    with pytest.raises(ModelImportError) as refused:
        importer.load_model(path)
    assert (refused.value.kind, refused.value.field_path) == (ErrorKind.EXTERNAL_DATA, TRAINING_FIELD_PATH)


def test_training_info_tensors_graphs_and_bindings_are_checked_like_the_graphs(tmp_path: Path) -> None:
    marker = "*/_ORT_MEM_ADDR_/*"
    (tmp_path / "*" / "_ORT_MEM_ADDR_").mkdir(parents=True)
    (tmp_path / "*" / "_ORT_MEM_ADDR_" / "*").write_bytes(bytes(16))
    callback = helper.make_node("PyOp", ["w"], ["u"], domain="com.example", name="run\u202e", module="os", class_name="Runner")
    model = training_info_model(marker, initialization_nodes=[callback])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    model.training_info[0].algorithm.doc_string = "ring \x07"
    model.training_info[0].update_binding.add(key="b\x1b", value="w_new")
    path, data = _write(tmp_path, model)
    result = _stage(path)
    assert result.status == "fail"
    assert sorted(_codes(result)) == [
        ("bidi-override-character", "error", "ModelProto.training_info[0].initialization.node[0].name"),
        ("control-character", "warning", "ModelProto.training_info[0].algorithm.doc_string"),
        ("control-character", "warning", "ModelProto.training_info[0].update_binding[1]"),
        ("custom-operator-domain", "warning", "ModelProto.training_info[0].initialization.node[0].domain"),
        ("external-data-memory-address", "error", f"{TRAINING_FIELD_PATH}.external_data[0]"),
        ("python-callback-op", "error", "ModelProto.training_info[0].initialization.node[0].op_type"),
    ]
    for finding in result.findings:
        assert_placed(data, finding)


# --- operators


def test_custom_domains_are_one_warning_per_domain_at_its_first_node(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Foo", ["a"], ["b"], domain="com.example"),
        helper.make_node("Bar", ["b"], ["c"], domain="com.example"),
        helper.make_node("Foo", ["c"], ["d"], domain="com.example"),
        helper.make_node("Normalizer", ["d"], ["e"], domain="ai.onnx.ml", norm="MAX"),
        helper.make_node("Relu", ["e"], ["y"], domain="ai.onnx"),
    ]
    inputs = [helper.make_tensor_value_info("x", FLOAT, [2])]
    model = _model(nodes, inputs=inputs, opsets={"": 21, "com.example": 1, "ai.onnx.ml": 3})
    path, data = _write(tmp_path, model)
    result = _stage(path)
    assert result.status == "pass"
    assert _codes(result) == [("custom-operator-domain", "warning", "ModelProto.graph.node[1].domain")]
    assert "3 node(s) of custom domain 'com.example'" in result.findings[0].message
    assert "'Bar', 'Foo'" in result.findings[0].message
    assert_placed(data, result.findings[0])


def test_a_call_of_a_model_local_function_is_not_a_custom_op(tmp_path: Path) -> None:
    function = helper.make_function(
        "local", "Twice", ["p"], ["q"], [helper.make_node("Add", ["p", "p"], ["q"])], [helper.make_opsetid("", 21)]
    )
    model = _model(
        [helper.make_node("Twice", ["x"], ["y"], domain="local")],
        inputs=[helper.make_tensor_value_info("x", FLOAT, [2])],
        opsets={"": 21, "local": 1},
        functions=[function],
    )
    path, _ = _write(tmp_path, model)
    assert _stage(path).findings == []


@pytest.mark.parametrize(
    ("op_type", "domain", "attributes"),
    [
        ("PyOp", "com.example", {"module": "os", "class_name": "Runner"}),  # onnxruntime's PyOp, as it is written
        ("PythonOp", "", {}),
        ("py_func", "tf", {}),
        ("Harmless", "com.example", {"module": "os", "compute": "system"}),  # named innocently, shaped like a callback
    ],
)
def test_python_callback_ops_are_errors_at_their_op_type(tmp_path: Path, op_type: str, domain: str, attributes: dict[str, str]) -> None:
    node = helper.make_node(op_type, ["x"], ["y"], domain=domain, **attributes)
    opsets = {"": 21} if domain == "" else {"": 21, domain: 1}
    path, data = _write(tmp_path, _model([node], inputs=[helper.make_tensor_value_info("x", FLOAT, [2])], opsets=opsets))
    result = _stage(path)
    assert result.status == "fail"
    callbacks = [f for f in result.findings if f.code == "python-callback-op"]
    assert [(f.severity, f.field_path, f.op_type) for f in callbacks] == [("error", "ModelProto.graph.node[0].op_type", op_type)]
    assert_placed(data, callbacks[0])


def test_ordinary_ops_with_a_module_attribute_alone_are_not_callbacks(tmp_path: Path) -> None:
    node = helper.make_node("Thing", ["x"], ["y"], domain="com.example", module="m")
    model = _model([node], inputs=[helper.make_tensor_value_info("x", FLOAT, [2])], opsets={"": 21, "com.example": 1})
    path, _ = _write(tmp_path, model)
    assert [f.code for f in _stage(path).findings] == ["custom-operator-domain"]


# --- text


def test_bidi_overrides_are_errors_and_control_characters_warnings_each_at_its_field(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu\u202egnp.exe"),  # U+202E RIGHT-TO-LEFT OVERRIDE
        helper.make_node("Relu", ["a"], ["y"], name="\x1b[31mred", doc_string="ring \x07 the bell"),
    ]
    inputs = [helper.make_tensor_value_info("x", FLOAT, [2])]
    model = _model(nodes, inputs=inputs, doc_string="lines\n\tand tabs are fine\r\n")
    helper.set_model_props(model, {"licence\x00": "MIT", "note": "see \u2066inside\u2069"})
    path, data = _write(tmp_path, model)
    result = _stage(path)
    assert result.status == "fail"
    assert sorted(_codes(result)) == [
        ("bidi-override-character", "error", "ModelProto.graph.node[0].name"),
        ("bidi-override-character", "error", "ModelProto.metadata_props[1]"),
        ("control-character", "warning", "ModelProto.graph.node[1].doc_string"),
        ("control-character", "warning", "ModelProto.graph.node[1].name"),
        ("control-character", "warning", "ModelProto.metadata_props[0]"),
    ]
    for finding in result.findings:
        assert_placed(data, finding)
        assert "\u202e" not in finding.message and "\x1b" not in finding.message  # quoted, never raw
    bidi = next(f for f in result.findings if f.field_path.endswith("node[0].name"))
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in bidi.message


def test_control_characters_in_value_names_and_function_names_are_found(tmp_path: Path) -> None:
    function = helper.make_function("local", "F\x7f", ["p"], ["q"], [helper.make_node("Relu", ["p"], ["q"])], [helper.make_opsetid("", 21)])
    nodes = [helper.make_node("Relu", ["x\tin"], ["y"])]
    inputs = [helper.make_tensor_value_info("x\tin", FLOAT, [2])]
    path, data = _write(tmp_path, _model(nodes, inputs=inputs, opsets={"": 21, "local": 1}, functions=[function]))
    result = _stage(path)
    assert sorted(_codes(result)) == [
        ("control-character", "warning", "ModelProto.functions[0].name"),
        ("control-character", "warning", "ModelProto.graph.input[0].name"),
    ]
    for finding in result.findings:
        assert_placed(data, finding)


# --- declared dimensions


def _declaring(dim: int) -> onnx.ModelProto:
    """A model whose intermediate value `a` is declared (value_info) with dimension `dim`."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    model = _model(nodes, inputs=[helper.make_tensor_value_info("x", FLOAT, ["N"])])
    model.graph.value_info.append(helper.make_tensor_value_info("a", FLOAT, ["N", dim]))
    return model


def test_declared_dims_past_the_bound_are_warnings(tmp_path: Path) -> None:
    path, data = _write(tmp_path, _declaring(2**31))
    result = _stage(path)
    assert result.status == "pass"
    assert _codes(result) == [("declared-dim-too-large", "warning", "ModelProto.graph.value_info[0]")]
    assert f"a dimension of {2**31}, more than the {2**31 - 1} allowed" in result.findings[0].message
    assert_placed(data, result.findings[0])
    assert _stage(path, SecurityBounds(max_declared_dim=2**32)).findings == []
    ok, _ = _write(tmp_path, _declaring(2**31 - 1), "ok.onnx")
    assert _stage(ok).findings == []


def test_a_declared_input_dim_past_the_bound_is_also_an_input_too_large(tmp_path: Path) -> None:
    inputs = [helper.make_tensor_value_info("x", FLOAT, ["N", 2**31])]
    path, _ = _write(tmp_path, _model([helper.make_node("Relu", ["x"], ["y"])], inputs=inputs))
    assert sorted(_codes(_stage(path))) == [
        ("declared-dim-too-large", "warning", "ModelProto.graph.input[0]"),
        ("static-input-too-large", "warning", "ModelProto.graph.input[0]"),
    ]


@pytest.mark.parametrize("bound", ["max_static_output", "max_declared_dim", "max_inlined_nodes", "max_loop_trips"])
def test_bounds_must_be_positive(bound: str) -> None:
    with pytest.raises(ValueError, match="positive"):
        SecurityBounds(**{bound: 0})


# --- big graphs: looked at in bulk, every finding still at its node


LEAKY: dict[str, Any] = {"alpha": 0.1}


def _chain(count: int, shape: list[int | str] | None) -> tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto]]:
    """`count` shape-keeping nodes (Relu, and LeakyRelu with an attribute) from input x to v{count}, every other value declared."""
    nodes = [
        helper.make_node(
            "LeakyRelu" if i % 3 == 0 else "Relu",
            [f"v{i}" if i else "x"],
            [f"v{i + 1}"],
            name=f"n{i}",
            **(LEAKY if i % 3 == 0 else {}),
        )
        for i in range(count)
    ]
    declared = [helper.make_tensor_value_info(f"v{i}", FLOAT, shape) for i in range(1, count, 2)]
    return nodes, declared


def test_one_odd_node_among_many_quiet_ones_is_found_at_its_field(tmp_path: Path) -> None:
    nodes, declared = _chain(3000, [1000, 1000])
    nodes[1200].name = "n\u202e1200"
    nodes[1500].doc_string = "tab\tand newline\n are fine"  # prose: not flagged
    nodes[2000].doc_string = "ring \x07"
    nodes[2500].attribute.append(helper.make_attribute("module", "os"))
    nodes[2500].attribute.append(helper.make_attribute("function", "system"))
    nodes[2600].op_type, nodes[2600].domain = "PyFunc", "tf"
    nodes[2700].domain = "com.example"
    declared[700].name = "v\x1b"
    declared[800].type.tensor_type.shape.dim[1].dim_value = 2**31
    model = _model(nodes, inputs=[helper.make_tensor_value_info("x", FLOAT, [1000, 1000])], opsets={"": 21, "tf": 1, "com.example": 1})
    model.graph.value_info.extend(declared)
    path, data = _write(tmp_path, model)
    result = _stage(path)
    assert _codes(result) == [
        ("bidi-override-character", "error", "ModelProto.graph.node[1200].name"),
        ("control-character", "warning", "ModelProto.graph.node[2000].doc_string"),
        ("python-callback-op", "error", "ModelProto.graph.node[2500].op_type"),
        ("python-callback-op", "error", "ModelProto.graph.node[2600].op_type"),
        ("custom-operator-domain", "warning", "ModelProto.graph.node[2600].domain"),
        ("custom-operator-domain", "warning", "ModelProto.graph.node[2700].domain"),
        ("control-character", "warning", "ModelProto.graph.value_info[700].name"),
        ("declared-dim-too-large", "warning", "ModelProto.graph.value_info[800]"),
    ]
    for finding in result.findings:
        if finding.code != "declared-dim-too-large":
            assert_placed(data, finding)


def test_shapes_are_followed_through_a_long_chain_of_shape_keeping_ops(tmp_path: Path) -> None:
    """x -> 3000 Relu and LeakyRelu nodes -> Expand: exact when x's shape is static, a lower bound when it is not."""
    cases: tuple[tuple[list[int | str], bool], ...] = (([1, 1000], True), (["N", 1000], False))
    for shape, exact in cases:
        nodes, declared = _chain(3000, None)
        nodes += [_const("shape", _ints("shape", [1_000_000, 1000])), helper.make_node("Expand", ["v3000", "shape"], ["y"])]
        model = _model(nodes, inputs=[helper.make_tensor_value_info("x", FLOAT, shape)])
        model.graph.value_info.extend(declared)
        path, _ = _write(tmp_path, model)
        result = _stage(path)
        assert _codes(result) == [("static-output-too-large", "error", "ModelProto.graph.node[3001]")]
        assert ("at least " in result.findings[0].message) is not exact
        nodes[-1] = helper.make_node("Expand", ["v3000", "shape"], ["y"])
        nodes[-2] = _const("shape", _ints("shape", [1, 1000]))
        assert _stage(_write(tmp_path, _model(nodes, inputs=model.graph.input))[0]).findings == []


# --- failing closed


def test_a_closed_model_makes_the_stage_incomplete(tmp_path: Path) -> None:
    path, _ = _write(tmp_path, range_model(1000.0))
    model = importer.load_model(path)
    model.close()
    result = security_stage(model, SecurityBounds())
    assert (result.status, result.findings) == ("incomplete", [])
    assert "closed" in result.reason


def test_a_failure_inside_the_stage_is_incomplete_never_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> Iterator[object]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(security, "estimate_statics", broken)
    path, _ = _write(tmp_path, range_model(1000.0))
    result = _stage(path)
    assert result.status == "incomplete"
    assert result.reason == "the security check did not finish: RuntimeError: a bug"
