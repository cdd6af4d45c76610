"""Real exporters: models written by torch.onnx, read by our importer.

`tools/export_torch_models.py` exports a small CNN, a small transformer, an
If/Loop model and an MLP with external data with both of torch.onnx's
exporters (TorchScript, `dynamo=False`, and torch.export, `dynamo=True`), plus
four option variants (model-local functions, the unoptimized dynamo graph, an
opset-7 / IR-3 file with initializers as inputs, a bfloat16 model), into the
ignored cache `.cache/torch-exports` (a session fixture; re-exported only when
torch, onnx, onnxscript or the script change). For every exported model:

- it imports, and its structural dump is byte-identical to the reference
  writer's (tools/onnx_dump.py, built on onnx.load), also through the CLI;
- graph resolution matches the file as onnx reads it: the same graphs (main and
  every If/Loop body), every graph's node count, every node input resolved to
  a value of its graph or an enclosing one, outputs produced by their node,
  initializers bound to their values (as input defaults when also listed as
  inputs), and each subgraph's captures equal to the outer names it reads
  (computed here from the onnx proto, independently of the importer);
- each initializer's and Constant tensor's `to_numpy()` equals
  `onnx.numpy_helper.to_array` (element types numpy has natively; bfloat16 and
  float8 as bit patterns);
- the external data models read their weights from the .data file.

The module is skipped as a whole when torch is not installed. When an exporter
cannot export one case on the installed torch (or onnxscript is missing for
the dynamo exporter), only that case's tests skip, with the exporter's error
as the reason. On torch 2.13.0 every case exports; the one trap: exporting an
eval-mode nn.TransformerEncoder under torch.no_grad() makes it take the fused
fast path, which the TorchScript exporter refuses (UnsupportedOperatorError:
aten::_transformer_encoder_layer_fwd), so the exporter script does not use
no_grad.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import export_torch_models as exports_tool
import numpy as np
import onnx
import onnx_dump
import pytest
from export_torch_models import Case, CaseResult
from onnx import numpy_helper

from importer import ResolvedGraph, load_model
from importer.__main__ import main as importer_cli
from importer.dump import render_dump
from importer.element_types import has_native_numpy_dtype
from importer.tensor import FROM_EXTERNAL, Tensor

torch = pytest.importorskip("torch", reason="torch is not installed: the real-exporter models cannot be made")

CASES = {case.name: case for case in exports_tool.CASES}
CONTROL_FLOW = [name for name, case in CASES.items() if case.control_flow]
EXTERNAL = [name for name, case in CASES.items() if case.external_data]


@pytest.fixture(scope="session")
def exported() -> dict[str, CaseResult]:
    """Every case exported into .cache/torch-exports (cached per torch version)."""
    return {result.case.name: result for result in exports_tool.export_all()}


def _model_path(exported: dict[str, CaseResult], name: str) -> Path:
    """The exported file of a case, or a skip naming why the exporter could not make it."""
    result = exported[name]
    if not result.ok:
        case = result.case
        pytest.skip(
            f"the {case.exporter} exporter cannot export {case.model}"
            f"{f' ({case.variant})' if case.variant else ''} on torch {torch.__version__}: {result.error}"
        )
    return result.model_path


@functools.cache
def _reference(path: Path) -> Any:
    """The model as onnx loads it, external data read in."""
    return onnx.load(str(path), format="protobuf")


def _onnx_graphs(graph: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(field path, GraphProto) of `graph` and every subgraph below it, as the importer names them."""
    yield path, graph
    for node_index, node in enumerate(graph.node):
        for attr_index, attribute in enumerate(node.attribute):
            prefix = f"{path}.node[{node_index}].attribute[{attr_index}]"
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _onnx_graphs(attribute.g, f"{prefix}.g")
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for graph_index, subgraph in enumerate(attribute.graphs):
                    yield from _onnx_graphs(subgraph, f"{prefix}.graphs[{graph_index}]")


def _outer_reads(graph: Any) -> list[str]:
    """Names a GraphProto (or its subgraphs) reads but does not define, in first-read order."""
    defined = {info.name for info in graph.input} | {tensor.name for tensor in graph.initializer}
    defined |= {sparse.values.name for sparse in graph.sparse_initializer}
    defined |= {name for node in graph.node for name in node.output if name}
    reads: list[str] = []

    def read(name: str) -> None:
        if name and name not in defined and name not in reads:
            reads.append(name)

    for node in graph.node:
        for name in node.input:
            read(name)
        for attribute in node.attribute:
            subgraphs = [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)
            for subgraph in subgraphs:
                for name in _outer_reads(subgraph):
                    read(name)
    for info in graph.output:
        read(info.name)
    return reads


def _graphs(root: ResolvedGraph) -> dict[str, ResolvedGraph]:
    return {graph.path: graph for graph in [root, *root.subgraphs()]}


def _enclosing(graph: ResolvedGraph) -> list[ResolvedGraph]:
    scopes: list[ResolvedGraph] = []
    scope: ResolvedGraph | None = graph
    while scope is not None:
        scopes.append(scope)
        scope = scope.parent
    return scopes


def _first_difference(actual: str, expected: str) -> str:
    for number, (ours, theirs) in enumerate(zip(actual.splitlines(), expected.splitlines(), strict=False), start=1):
        if ours != theirs:
            return f"line {number}: ours {ours[:200]!r}, reference {theirs[:200]!r}"
    return f"lengths differ: ours {len(actual)} chars, reference {len(expected)} chars"


@pytest.mark.parametrize("name", list(CASES))
def test_imports_with_the_reference_dump(exported: dict[str, CaseResult], name: str, report: list[str]) -> None:
    path = _model_path(exported, name)
    expected = onnx_dump.dump_model(path)
    with load_model(path) as model:
        actual = render_dump(model.proto)
        subgraphs = list(model.graph.subgraphs())
        node_count = len(model.graph.nodes) + sum(len(graph.nodes) for graph in subgraphs)
        functions = len(model.functions)
    assert actual == expected, f"{name}: dump differs from the reference at {_first_difference(actual, expected)}"
    result = exported[name]
    made = "cached" if result.reused else f"exported in {result.seconds:.1f}s"
    report.append(f"exporters: {name}: identical dump; {node_count} nodes, {len(subgraphs)} subgraphs, "
                  f"{functions} functions, {path.stat().st_size} bytes ({made})")  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_cli_dump_matches_the_reference(exported: dict[str, CaseResult], name: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = _model_path(exported, name)
    expected = onnx_dump.dump_model(path)
    capsys.readouterr()
    assert importer_cli(["dump", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out == expected


@pytest.mark.parametrize("name", list(CASES))
def test_graph_resolution_matches_the_file(exported: dict[str, CaseResult], name: str) -> None:
    path = _model_path(exported, name)
    reference = dict(_onnx_graphs(_reference(path).graph, "ModelProto.graph"))
    with load_model(path) as model:
        ours = _graphs(model.graph)
        assert sorted(ours) == sorted(reference), "the importer's subgraphs are not the file's"
        for graph_path, graph in ours.items():
            proto = reference[graph_path]
            where = f"{name} {graph_path}"
            assert [value.name for value in graph.inputs] == [info.name for info in proto.input], where
            assert [value.name for value in graph.outputs] == [info.name for info in proto.output], where
            assert len(graph.nodes) == len(proto.node), f"{where}: node count"
            assert sorted(node.index for node in graph.nodes) == list(range(len(proto.node))), where
            if not graph.nodes_were_reordered:
                assert [node.index for node in graph.nodes] == list(range(len(proto.node))), where
            position = {node.index: order for order, node in enumerate(graph.nodes)}
            scopes = _enclosing(graph)
            for node in graph.nodes:
                node_proto = proto.node[node.index]
                at = f"{where}.node[{node.index}] ({node.op_type})"
                assert node.op_type == node_proto.op_type, at
                assert len(node.inputs) == len(node_proto.input), at
                for value, input_name in zip(node.inputs, node_proto.input, strict=True):
                    if not input_name:
                        assert value is None, at
                        continue
                    assert value is not None, f"{at}: input {input_name!r} unresolved"
                    assert value.name == input_name, at
                    assert value.graph in scopes, f"{at}: {input_name!r} resolved outside its scopes"
                    if value.graph is graph:
                        if value.producer is not None:
                            assert position[value.producer.index] < position[node.index], f"{at}: not topological"
                    else:
                        assert value in graph.captures, f"{at}: outer {input_name!r} is not a capture"
                assert [value.name if value else "" for value in node.outputs] == list(node_proto.output), at
                for value in node.outputs:
                    assert value is None or value.producer is node, at
            assert [value.name for value in graph.captures] == _outer_reads(proto), f"{where}: captures"
            input_names = {info.name for info in proto.input}
            for tensor in graph.initializers():
                value = graph.values[tensor.name]
                assert value.initializer is tensor, f"{where}: initializer {tensor.name!r}"
                assert value.kind == ("input" if tensor.name in input_names else "initializer"), f"{where}: {tensor.name!r}"
        assert model.graph.captures == [], "the main graph captures nothing"


@pytest.mark.parametrize("name", CONTROL_FLOW)
def test_if_and_loop_bodies_resolve_with_their_captures(exported: dict[str, CaseResult], name: str) -> None:
    path = _model_path(exported, name)
    with load_model(path) as model:
        by_op = {node.op_type: node for node in model.graph.nodes}
        assert {"If", "Loop"} <= by_op.keys(), f"{name}: the export holds no If/Loop: {sorted(by_op)}"
        if_node, loop_node = by_op["If"], by_op["Loop"]
        assert sorted(attribute for attribute, _ in if_node.subgraphs) == ["else_branch", "then_branch"]
        assert [attribute for attribute, _ in loop_node.subgraphs] == ["body"]
        bodies = [graph for _, graph in [*if_node.subgraphs, *loop_node.subgraphs]]
        # Both exporters' bodies read the outer input `x` and the parameter `scale`.
        for body in bodies:
            assert body.parent is model.graph
            assert body.captures, f"{name} {body.path}: expected captures of outer values"
            for value in body.captures:
                assert value.graph is model.graph
                owner = if_node if body in [graph for _, graph in if_node.subgraphs] else loop_node
                assert owner in value.consumers, f"{value.name!r} is read through {owner!r} but not its consumer"
        captured = {value.name for body in bodies for value in body.captures}
        assert {"x", "scale"} <= captured, f"{name}: captures {sorted(captured)}"


def _same_values(tensor: Tensor, tensor_proto: Any, where: str) -> str:
    """Assert our values equal numpy_helper's; say how they were compared.

    "native": numpy has the element type. "bits": numpy lacks it and to_numpy
    gives the bit patterns (bfloat16, float8), compared with the ml_dtypes
    array numpy_helper returns viewed as the same unsigned type. "skipped":
    neither (the unpacked sub-byte types).
    """
    assert tensor.dims == tuple(tensor_proto.dims), where
    actual, expected = tensor.to_numpy(), numpy_helper.to_array(tensor_proto)
    if not has_native_numpy_dtype(tensor.data_type):
        if actual.dtype.kind != "u" or actual.dtype.itemsize != expected.dtype.itemsize:
            return "skipped"
        assert actual.shape == expected.shape, where
        assert np.array_equal(actual, expected.view(actual.dtype)), where
        return "bits"
    assert actual.dtype == expected.dtype, where
    assert actual.shape == expected.shape, where
    assert np.array_equal(actual, expected, equal_nan=actual.dtype.kind in "fc"), where
    return "native"


@pytest.mark.parametrize("name", list(CASES))
def test_initializers_equal_numpy_helper(exported: dict[str, CaseResult], name: str, report: list[str]) -> None:
    path = _model_path(exported, name)
    reference = dict(_onnx_graphs(_reference(path).graph, "ModelProto.graph"))
    how: Counter[str] = Counter()
    constants = 0
    with load_model(path) as model:
        for graph_path, graph in _graphs(model.graph).items():
            theirs = list(reference[graph_path].initializer)
            ours = graph.initializers()
            assert [tensor.name for tensor in ours] == [tensor.name for tensor in theirs], graph_path
            for index, (tensor, tensor_proto) in enumerate(zip(ours, theirs, strict=True)):
                how[_same_values(tensor, tensor_proto, f"{graph_path}.initializer[{index}] {tensor.name!r}")] += 1
            # Tensors in node attributes (Constant values) too.
            for node in graph.nodes:
                node_proto = reference[graph_path].node[node.index]
                for attr_index, (attribute, attribute_proto) in enumerate(zip(node.proto.attribute, node_proto.attribute, strict=True)):
                    if attribute_proto.type == onnx.AttributeProto.TENSOR:
                        assert isinstance(attribute.value, Tensor)
                        where = f"{graph_path}.node[{node.index}].attribute[{attr_index}].t"
                        constants += _same_values(attribute.value, attribute_proto.t, where) != "skipped"
    compared = how["native"] + how["bits"]
    assert compared > 0, f"{name}: no initializer compared"
    bits = f" ({how['bits']} as bit patterns)" if how["bits"] else ""
    skipped = f", {how['skipped']} of sub-byte types not compared" if how["skipped"] else ""
    report.append(f"exporters: {name}: {compared} initializers{bits} and {constants} attribute tensors equal numpy_helper's{skipped}")


@pytest.mark.parametrize("name", EXTERNAL)
def test_external_weights_come_from_the_data_file(exported: dict[str, CaseResult], name: str) -> None:
    path = _model_path(exported, name)
    data_file = path.parent / exports_tool.DATA_FILE
    assert data_file.is_file()
    on_disk = onnx.load(str(path), format="protobuf", load_external_data=False)
    external_names = [t.name for t in on_disk.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external_names, f"{name}: the export wrote no external tensors"
    stored = data_file.read_bytes()
    with load_model(path) as model:
        ours = [tensor for tensor in model.graph.initializers() if tensor.source == FROM_EXTERNAL]
        assert [tensor.name for tensor in ours] == external_names
        for tensor in ours:
            assert tensor.external_data is not None
            assert tensor.external_data["location"] == exports_tool.DATA_FILE, tensor.name
            assert tensor.data_file == exports_tool.DATA_FILE, tensor.name
            start = tensor.data_offset
            assert start is not None
            assert tensor.data == stored[start : start + tensor.byte_length], tensor.name
        external_bytes = sum(tensor.byte_length for tensor in ours)
    assert external_bytes > 1 << 20, "the external weights should be megabytes"


def test_every_case_was_attempted(exported: dict[str, CaseResult]) -> None:
    assert [exported[name].case for name in CASES] == list(exports_tool.CASES)
    for result in exported.values():
        assert isinstance(result.case, Case)
        assert result.ok or result.error, f"{result.case.name}: failed without a recorded reason"
