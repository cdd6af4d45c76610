"""`external_locations` walks only the fields that can hold a tensor (importer/external_scan.py), and lists what the
reader reads: the same files, in the same order, refused at the same field path and byte offset.

The reference is the reader itself (`read_model`, whose `external_tensors` are every external tensor it read): on a
model with an external tensor in every place one can be (initializer, sparse values and indices, a node's `t` and
`tensors`, a subgraph's initializer, both `training_info` graphs, a function body's Constant and a function's default
attribute), on one whose `external_data` names a location its `data_location` does not use, and on every backend model
and sample. A bad location in each place is refused where an import refuses it.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper
from support.paths import BACKEND_DATA, REPO

from importer import ErrorKind, Limits, ModelImportError, external_locations, load_model, open_model
from importer.read_context import ReadContext
from importer.read_model import read_model

SAMPLES = REPO / "testdata" / "samples"


def _read_locations(path: Path) -> list[str]:
    """The reference: the locations of the external tensors the reader reads, each once, in reading order."""
    owner = open_model(path)
    try:
        ctx = ReadContext(owner.parse_buffer(), owner, Limits())
        read_model(ctx)
        found: dict[str, None] = {}
        for tensor in ctx.external_tensors:
            found.setdefault(posixpath.normpath((tensor.external_data or {}).get("location", "")))
        return list(found)
    finally:
        owner.close()


def _external(name: str, location: str, dims: tuple[int, ...] = (2,), data_type: int = TensorProto.FLOAT) -> TensorProto:
    tensor = TensorProto(name=name, data_type=data_type, dims=dims, data_location=TensorProto.EXTERNAL)
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location
    return tensor


def _every_place(locations: dict[str, str]) -> onnx.ModelProto:
    """A model with an external tensor at each place of `locations` (place -> location)."""
    out = helper.make_tensor_value_info("s", TensorProto.FLOAT, None)
    then = helper.make_graph([], "then", [], [out], [_external("s", locations["subgraph"])])
    values = _external("sv", locations["sparse values"])
    sparse = onnx.SparseTensorProto(values=values, indices=_external("si", locations["sparse indices"], (2,), TensorProto.INT64), dims=[4])
    items = [_external("k0", "plain.bin"), _external("k1", locations["attribute tensors"])]
    nodes = [
        helper.make_node("Constant", [], ["c"], value=_external("c", locations["attribute t"])),
        helper.make_node("Custom", [], ["k"], domain="x", items=items),
        helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=then),
    ]
    inner = _external("not-external", "named-but-default.bin")
    inner.data_location = TensorProto.DEFAULT
    inner.raw_data = b"\0" * 8
    inputs = [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    graph = helper.make_graph(nodes, "g", inputs, outputs, [_external("w", locations["initializer"]), inner], sparse_initializer=[sparse])
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("x", 1), helper.make_opsetid("local", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    for field in ("initialization", "algorithm"):
        training = model.training_info.add()
        getattr(training, field).CopyFrom(helper.make_graph([], field, [], [], [_external(field, locations[f"training {field}"])]))
    body = helper.make_node("Constant", [], ["f"], value=_external("f", locations["function body"]))
    function = helper.make_function("local", "F", [], ["f"], [body], [helper.make_opsetid("", 21)])
    default = helper.make_attribute("d", _external("d", locations["function default"]))
    function.attribute_proto.append(default)
    model.functions.append(function)
    return model


PLACES = (
    "initializer", "sparse values", "sparse indices", "attribute t", "attribute tensors", "subgraph",
    "training initialization", "training algorithm", "function body", "function default",
)  # fmt: skip


def test_every_place_is_listed_as_the_reader_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(_every_place({place: f"files/{index}.bin" for index, place in enumerate(PLACES)}).SerializeToString())
    listed = external_locations(path)
    assert listed == _read_locations(path)
    assert sorted(listed) == sorted({*(f"files/{index}.bin" for index in range(len(PLACES))), "plain.bin"})
    assert "named-but-default.bin" not in listed


@pytest.mark.parametrize("place", [place for place in PLACES if place != "function default"])
def test_a_bad_location_is_refused_where_an_import_refuses_it(tmp_path: Path, place: str) -> None:
    """(A function's default attribute has no place of its own in the import's refusal: it is refused there, not placed.)"""
    path = tmp_path / "model.onnx"
    path.write_bytes(_every_place({other: "../outside.bin" if other == place else "inside.bin" for other in PLACES}).SerializeToString())
    for name in ("inside.bin", "plain.bin"):
        (tmp_path / name).write_bytes(bytes(16))  # every file there: the only refusal is the location's
    with pytest.raises(ModelImportError) as listed:
        external_locations(path)
    with pytest.raises(ModelImportError) as imported:
        load_model(path)
    assert listed.value.kind is imported.value.kind is ErrorKind.EXTERNAL_DATA
    assert (listed.value.field_path, listed.value.offset) == (imported.value.field_path, imported.value.offset), place
    assert "'..' segment" in listed.value.message


def test_every_model_to_hand_is_listed_as_the_reader_reads_it(backend_manifest: dict[str, Any], backend_dir: Path) -> None:
    paths = [backend_dir / item for item in backend_manifest["models"]]
    paths += sorted((BACKEND_DATA / "light").glob("*.onnx")) + sorted(SAMPLES.rglob("*.onnx"))
    differences = {}
    for path in paths:
        try:
            expected: list[str] | str = _read_locations(path)
        except ModelImportError as error:
            expected = f"refused: {error.kind}"
        try:
            listed: list[str] | str = external_locations(path)
        except ModelImportError as error:
            listed = f"refused: {error.kind}"
        if listed != expected and not (isinstance(expected, str) and isinstance(listed, list)):
            differences[str(path)] = (listed, expected)  # a model the reader refuses for another reason may still list
    assert len(paths) > 2000
    assert not differences, differences
    assert any(external_locations(path) for path in SAMPLES.rglob("*.onnx"))
