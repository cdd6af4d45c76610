"""`training_info` (ModelProto field 20) is read like the graph, on real files (issue 35).

Its `initialization` and `algorithm` graphs are read by the graph's rules
(docs/import-rules.md §2), and their tensors' external data is confined by
§5 like the main graph's: an absolute location, a `..` segment or a link out
of the folder refuses the model (kind ExternalData) with the field path and
byte offset of the tensor, while a relative file beside the model loads and
reads back. The structural dump leaves training_info out, as onnx's does
(docs/dump-format.md), so both dumps stay equal.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_dump  # tools/, on the path (conftest): the reference writer
import pytest
from onnx import TensorProto, helper
from support.field_places import assert_field_at
from support.training_info_model import FIELD_PATH, external_tensor, training_info_model

from importer import ErrorKind, ModelImportError, external_locations, load_model
from importer.dump import render_dump
from importer.tensor_places import tensor_places

WEIGHTS = np.array([1.5, -2.0, 3.25, 0.0], np.float32)


def _save(folder: Path, model: onnx.ModelProto) -> tuple[Path, bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    data = model.SerializeToString()
    path = folder / "model.onnx"
    path.write_bytes(data)
    return path, data


def _refused(path: Path) -> ModelImportError:
    with pytest.raises(ModelImportError) as refused:
        load_model(path)
    return refused.value


@pytest.mark.parametrize("location", ["/etc/passwd", "../secret.bin", "a/../../secret.bin", "..\\secret.bin"])
def test_a_location_the_main_graph_may_not_have_refuses_the_model(tmp_path: Path, location: str) -> None:
    (tmp_path / "secret.bin").write_bytes(WEIGHTS.tobytes())  # there to be read, were the location followed
    path, data = _save(tmp_path / "inner", training_info_model(location))
    error = _refused(path)
    assert (error.kind, error.field_path) == (ErrorKind.EXTERNAL_DATA, FIELD_PATH)
    assert "not relative" in error.message or "'..' segment" in error.message
    assert error.offset is not None
    assert_field_at(data, onnx.ModelProto.FromString(data), FIELD_PATH, error.offset, error)  # the initializer's key
    with pytest.raises(ModelImportError) as listed:
        external_locations(path)
    assert (listed.value.kind, listed.value.field_path) == (ErrorKind.EXTERNAL_DATA, FIELD_PATH)


def test_a_link_out_of_the_folder_refuses_the_model(tmp_path: Path) -> None:
    (tmp_path / "secret.bin").write_bytes(WEIGHTS.tobytes())
    path, _ = _save(tmp_path / "inner", training_info_model("w.bin"))
    (tmp_path / "inner" / "w.bin").symlink_to(tmp_path / "secret.bin")
    error = _refused(path)
    assert (error.kind, error.field_path) == (ErrorKind.EXTERNAL_DATA, FIELD_PATH)


def test_a_missing_file_refuses_the_model(tmp_path: Path) -> None:
    path, _ = _save(tmp_path, training_info_model("w.bin"))
    error = _refused(path)
    assert (error.kind, error.field_path) == (ErrorKind.EXTERNAL_DATA, FIELD_PATH)
    assert "w.bin" in error.message


def test_a_relative_file_beside_the_model_loads_and_reads_back(tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_bytes(WEIGHTS.tobytes())
    path, _ = _save(tmp_path, training_info_model("w.bin"))
    assert external_locations(path) == ["w.bin"]
    with load_model(path) as model:
        (training,) = model.proto.training_info
        assert training.initialization is not None and training.algorithm is not None
        assert [(entry.key, entry.value) for entry in training.update_binding] == [("w", "w_new")]
        assert [node.op_type for node in training.algorithm.node] == ["Identity"]
        places = {place.field_path: place.tensor for place in tensor_places(model.proto)}
        assert list(places) == [FIELD_PATH]
        np.testing.assert_array_equal(places[FIELD_PATH].to_numpy(), WEIGHTS)
        assert [node.op_type for node in model.graph.nodes] == ["Relu"]  # the main graph is the model's graph still
        assert render_dump(model.proto) == onnx_dump.dump_model(path)  # training_info is in neither dump


def test_tensors_in_the_algorithm_graph_and_its_subgraphs_are_confined_too(tmp_path: Path) -> None:
    model = training_info_model("w.bin")
    branch = helper.make_graph(
        [helper.make_node("Constant", [], ["k"], value=external_tensor("k", "/etc/shadow"))],
        "branch",
        [],
        [helper.make_tensor_value_info("k", TensorProto.FLOAT, [4])],
    )
    model.training_info[0].algorithm.node.append(
        helper.make_node("If", ["c"], ["z"], then_branch=branch, else_branch=branch, name="choose")
    )
    (tmp_path / "w.bin").write_bytes(WEIGHTS.tobytes())
    path, data = _save(tmp_path, model)
    error = _refused(path)
    expected = "ModelProto.training_info[0].algorithm.node[1].attribute[0].g.node[0].attribute[0].t"
    assert (error.kind, error.field_path) == (ErrorKind.EXTERNAL_DATA, expected)
    assert error.offset is not None
    assert_field_at(data, onnx.ModelProto.FromString(data), expected, error.offset, error)


def test_a_training_graph_is_read_by_the_graphs_rules(tmp_path: Path) -> None:
    model = training_info_model("w.bin")
    model.training_info[0].algorithm.node[0].name = "identity"
    data = model.SerializeToString().replace(b"identity", b"identit\xff")  # a name that is not UTF-8
    (tmp_path / "model.onnx").write_bytes(data)
    error = _refused(tmp_path / "model.onnx")
    assert (error.kind, error.field_path) == (ErrorKind.MALFORMED, "ModelProto.training_info[0].algorithm.node[0].name")
