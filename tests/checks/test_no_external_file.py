"""`names_no_external_file`: a byte search that says a model file certainly names no external data file (no listing
worker needed), never that one does not when it does: any file holding the bytes `location` anywhere (an external
tensor's entry, or only a doc string), a file past QUICK_LOOK_BYTES, an empty or unreadable one, goes to the worker."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from importer import external_locations
from service.checks import check_worker
from service.checks.check_worker import names_no_external_file


def _model(path: Path, doc: str = "", external: bool = False) -> Path:
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2])
    if external:
        tensor.data_location = TensorProto.EXTERNAL
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", "w.bin"
    else:
        tensor.raw_data = bytes(8)
    graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info("w", TensorProto.FLOAT, [2])], [tensor], doc_string=doc)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), str(path))
    return path


def test_only_a_file_without_the_bytes_is_said_to_name_none(tmp_path: Path) -> None:
    inline = _model(tmp_path / "inline.onnx")
    external = _model(tmp_path / "external.onnx", external=True)
    worded = _model(tmp_path / "worded.onnx", doc="the weights' location is given below")
    assert names_no_external_file(str(inline)) and external_locations(inline) == []
    assert not names_no_external_file(str(external)) and external_locations(external) == ["w.bin"]
    assert not names_no_external_file(str(worded)) and external_locations(worded) == []  # the worker tells that one
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert not names_no_external_file(str(tmp_path / "empty.onnx"))
    assert not names_no_external_file(str(tmp_path / "missing.onnx"))


def test_a_file_past_the_quick_look_goes_to_the_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inline = _model(tmp_path / "inline.onnx")
    monkeypatch.setattr(check_worker, "QUICK_LOOK_BYTES", inline.stat().st_size - 1)
    assert not names_no_external_file(str(inline))
