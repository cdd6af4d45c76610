"""Calls of model-local functions counted without inlining (issue 35): no model buys more work than its size.

The counter (`function_expansion`) on models written with onnx's helper and
read back with the importer: exact counts, each function counted once (the
3 KB fan-out model of 2^40 nodes in milliseconds), calls inside subgraphs and
inside function bodies' subgraphs, recursion, duplicate definitions, a chain
of thousands of functions. Then the `security` stage's
`function-expansion-too-large` error at the outermost call (field path and
byte offset checked on the bytes), and the check worker's stages, run in
this process: a model past the bound hands nothing to onnx or onnxruntime
(`shape`, `runtime`, `smoke` skipped, with the reason).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from multiprocessing import Pipe
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from support.fanout_model import DOMAIN, fanout_model
from support.field_places import assert_field_at

import importer
from service.checks.outcome import Stage, StageResult
from service.checks.stages import in_worker
from service.checks.stages.function_expansion import UNBOUNDED, function_expansion
from service.checks.stages.security import FUNCTION_EXPANSION_TOO_LARGE, SecurityBounds, expansion_findings, security_stage
from service.sandbox.protocol import WorkerJob

FLOAT = TensorProto.FLOAT
OPSETS = [helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)]


def _load(tmp_path: Path, model: onnx.ModelProto) -> tuple[importer.OnnxModel, bytes]:
    data = model.SerializeToString()
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    return importer.load_model(path), data


def _function(name: str, nodes: list[onnx.NodeProto]) -> onnx.FunctionProto:
    return helper.make_function(DOMAIN, name, ["x"], ["y"], nodes, OPSETS)


def _call(name: str, inputs: str = "x", output: str = "y") -> onnx.NodeProto:
    return helper.make_node(name, [inputs], [output], domain=DOMAIN)


def _main(nodes: list[onnx.NodeProto], functions: list[onnx.FunctionProto]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", FLOAT, [2])], [helper.make_tensor_value_info("y", FLOAT, [2])]
    )
    model = helper.make_model(graph, opset_imports=OPSETS, functions=functions)
    model.ir_version = 10
    return model


def _branch(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    return helper.make_graph([node], name, [], [helper.make_tensor_value_info(node.output[0], FLOAT, [2])])


# --- the count


@pytest.mark.parametrize(("depth", "calls"), [(0, 1), (3, 1), (10, 1), (10, 3)])
def test_the_count_is_exact(tmp_path: Path, depth: int, calls: int) -> None:
    model, _ = _load(tmp_path, fanout_model(depth, calls=calls))
    with model:
        expansion = function_expansion(model, 10**9)
    assert expansion.nodes == calls * 2**depth
    assert not expansion.too_large


def test_the_3_kb_fan_out_model_is_counted_at_once_and_not_inlined(tmp_path: Path) -> None:
    model, data = _load(tmp_path, fanout_model(40))
    assert len(data) < 4096
    started = time.perf_counter()
    with model:
        expansion = function_expansion(model, 1_000_000)
    assert time.perf_counter() - started < 0.5
    assert expansion.nodes == expansion.callee_nodes == 2**40
    assert expansion.field_path == "ModelProto.graph.node[0]" and expansion.callee == (DOMAIN, "f40", "")


def test_the_bound_is_passed_where_the_running_total_passes_it(tmp_path: Path) -> None:
    model, _ = _load(tmp_path, fanout_model(10, calls=3))  # 1,024 nodes a call
    with model:
        assert not function_expansion(model, 3072).too_large  # exactly the bound: not past it
        expansion = function_expansion(model, 2500)
    assert expansion.nodes == 3072
    assert (expansion.field_path, expansion.callee_nodes) == ("ModelProto.graph.node[2]", 1024)


def test_a_graph_without_calls_expands_to_nothing_whatever_its_size(tmp_path: Path) -> None:
    relus = [helper.make_node("Relu", ["x" if index == 0 else f"v{index}"], [f"v{index + 1}"]) for index in range(50)]
    relus.append(helper.make_node("Relu", ["v50"], ["y"]))
    unused = fanout_model(30).functions  # defined, never called: nothing inlines them
    model, _ = _load(tmp_path, _main(relus, list(unused)))
    with model:
        expansion = function_expansion(model, 10)
    assert (expansion.nodes, expansion.too_large) == (0, False)


def test_calls_in_subgraphs_and_in_function_bodies_subgraphs_are_counted(tmp_path: Path) -> None:
    functions = list(fanout_model(12).functions)  # f0 .. f12
    # g: one If whose branches call f12 and f11 (both are counted: 1 + 2^12 + 2^11), called from a branch of the main graph's If
    branching = helper.make_node(
        "If", ["c"], ["y"], then_branch=_branch(_call("f12", "x", "a"), "then"), else_branch=_branch(_call("f11", "x", "b"), "else")
    )
    functions.append(helper.make_function(DOMAIN, "g", ["c", "x"], ["y"], [branching], OPSETS))
    outer = helper.make_node(
        "If", ["c"], ["y"], then_branch=_branch(helper.make_node("g", ["c", "x"], ["z"], domain=DOMAIN), "outer"),
        else_branch=_branch(helper.make_node("Relu", ["x"], ["w"]), "plain"),
    )  # fmt: skip
    graph = helper.make_graph(
        [outer], "g", [helper.make_tensor_value_info(name, kind, [2]) for name, kind in (("c", TensorProto.BOOL), ("x", FLOAT))],
        [helper.make_tensor_value_info("y", FLOAT, [2])],
    )  # fmt: skip
    proto = helper.make_model(graph, opset_imports=OPSETS, functions=functions)
    proto.ir_version = 10
    model, data = _load(tmp_path, proto)
    with model:
        expansion = function_expansion(model, 5000)
        (finding,) = expansion_findings(model, 5000)
    assert expansion.nodes == 1 + 2**12 + 2**11  # g's If, and both branches
    # the outermost call, in the main graph's then_branch (onnx's helper writes attributes in name order)
    assert expansion.field_path == "ModelProto.graph.node[0].attribute[1].g.node[0]"
    assert finding.field_path == expansion.field_path and finding.op_type == "g"
    assert_field_at(data, onnx.ModelProto.FromString(data), finding.field_path, finding.offset, finding)


def test_a_function_that_calls_itself_never_ends(tmp_path: Path) -> None:
    ping = _function("ping", [_call("pong")])
    pong = _function("pong", [helper.make_node("Relu", ["x"], ["t"]), _call("ping", "t")])
    model, _ = _load(tmp_path, _main([helper.make_node("Relu", ["x"], ["r"]), _call("ping", "r")], [ping, pong]))
    with model:
        expansion = function_expansion(model, 10**12)
        (finding,) = expansion_findings(model, 10**12)
    assert expansion.nodes == expansion.callee_nodes == UNBOUNDED
    assert expansion.field_path == "ModelProto.graph.node[1]"
    assert "never ends" in finding.message and "calls itself" in finding.message


def test_a_function_defined_twice_counts_as_its_larger_definition(tmp_path: Path) -> None:
    functions = list(fanout_model(20).functions)
    cheap = _function("twice", [helper.make_node("Relu", ["x"], ["y"])])
    costly = _function("twice", [_call("f20")])
    for order in ([cheap, costly], [costly, cheap]):
        model, _ = _load(tmp_path, _main([_call("twice")], [*functions, *order]))
        with model:
            assert function_expansion(model, 10**9).nodes == 2**20


def test_a_chain_of_thousands_of_functions_needs_no_recursion(tmp_path: Path) -> None:
    count = 5000  # past Python's recursion limit
    chain = [_function("c0", [helper.make_node("Relu", ["x"], ["y"])])]
    chain += [_function(f"c{k}", [_call(f"c{k - 1}"), helper.make_node("Relu", ["y"], ["z"])]) for k in range(1, count)]
    for function in chain[1:]:
        function.node[0].output[0] = "t"
        function.node[1].input[0] = "t"
        function.node[1].output[0] = "y"
    model, _ = _load(tmp_path, _main([_call(f"c{count - 1}")], chain))
    with model:
        assert function_expansion(model, 10**9).nodes == count


# --- the finding and what it stops


def test_the_security_stage_fails_the_fan_out_model_at_the_outermost_call(tmp_path: Path) -> None:
    model, data = _load(tmp_path, fanout_model(40))
    with model:
        result = security_stage(model, SecurityBounds())
    assert result.status == "fail"
    (finding,) = result.findings
    assert (finding.code, finding.severity, finding.field_path) == (FUNCTION_EXPANSION_TOO_LARGE, "error", "ModelProto.graph.node[0]")
    assert (finding.node_name, finding.op_type, finding.domain) == ("call0", "f40", DOMAIN)
    assert "1,099,511,627,776 nodes" in finding.message and "1,000,000" in finding.message and "--max-inlined-nodes" in finding.message
    assert_field_at(data, onnx.ModelProto.FromString(data), finding.field_path, finding.offset, finding)


def test_the_bound_is_the_callers(tmp_path: Path) -> None:
    model, _ = _load(tmp_path, fanout_model(12))
    with model:
        assert security_stage(model, SecurityBounds(max_inlined_nodes=4096)).findings == []
        assert [f.code for f in security_stage(model, SecurityBounds(max_inlined_nodes=4095)).findings] == [FUNCTION_EXPANSION_TOO_LARGE]
    with pytest.raises(ValueError, match="positive"):
        SecurityBounds(max_inlined_nodes=0)


def _check_worker(model: importer.OnnxModel, job: WorkerJob) -> dict[str, dict[str, object]]:
    """The check worker's stages of `job`, run here: each report as sent."""
    reading, writing = Pipe(duplex=False)
    in_worker.send_checks(writing, model, job, "test")
    reports: dict[str, dict[str, object]] = {}
    while reading.poll():
        report = json.loads(reading.recv_bytes())
        if "stage" in report:
            reports[report["stage"]] = report
    return reports


def test_the_check_worker_hands_a_model_past_the_bound_to_no_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*_: object) -> None:
        raise AssertionError("a stage was run")

    for name in ("shape_stage", "runtime_stage", "smoke_stage"):
        monkeypatch.setattr(in_worker, name, never)
    job = WorkerJob("checks", 1 << 30, 60, 10, checks=("shape", "runtime", "smoke"))
    model, _ = _load(tmp_path, fanout_model(40))
    with model:
        started = time.perf_counter()
        reports = _check_worker(model, job)
    assert time.perf_counter() - started < 1
    assert list(reports) == ["shape", "runtime", "smoke"]
    for report in reports.values():
        assert report["status"] == "skipped"
        reason = str(report["reason"])
        assert "--max-inlined-nodes" in reason and "ModelProto.graph.node[0]" in reason


def test_the_setting_reaches_the_check_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    def runner(stage: Stage, *_: object) -> Callable[[], StageResult]:
        def stand_in() -> StageResult:
            ran.append(stage)
            return StageResult(stage).finish()

        return stand_in

    monkeypatch.setattr(in_worker, "_stage_runner", runner)
    model, _ = _load(tmp_path, fanout_model(12))
    with model:
        under = _check_worker(model, WorkerJob("checks", 1 << 30, 60, 10, checks=("shape",), max_inlined_nodes=4096))
        over = _check_worker(model, WorkerJob("checks", 1 << 30, 60, 10, checks=("shape",), max_inlined_nodes=4095))
    assert (under["shape"]["status"], ran) == ("pass", ["shape"])
    assert over["shape"]["status"] == "skipped"
