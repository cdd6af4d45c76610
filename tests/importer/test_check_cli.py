"""`python -m importer check`, run as a real process: the JSON, the exit codes, refusals."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper
from support.paths import REPO


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "importer", *args], capture_output=True, text=True, cwd=REPO, timeout=120)


def _save(tmp_path: Path, nodes: list[onnx.NodeProto], opsets: dict[str, int] | None = None) -> Path:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, [2])],
    )
    imports = [helper.make_opsetid(domain, version) for domain, version in (opsets or {"": 21}).items()]
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=imports), path)
    return path


def test_a_valid_model_prints_no_diagnostics_and_exits_0(tmp_path: Path) -> None:
    result = _run("check", str(_save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])])))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"diagnostics": []}
    assert result.stderr == ""


def test_errors_are_listed_with_their_places_and_exit_1(tmp_path: Path) -> None:
    path = _save(tmp_path, [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Concat", ["a", "a"], ["y"])])
    result = _run("check", str(path))
    assert result.returncode == 1, result.stderr
    (diagnostic,) = json.loads(result.stdout)["diagnostics"]
    model = onnx.load(path)
    assert diagnostic == {
        "severity": "error",
        "code": "missing-attribute",
        "message": "required attribute 'axis' is missing",
        "node_name": "",
        "op_type": "Concat",
        "domain": "",
        "field_path": "ModelProto.graph.node[1]",
        "offset": diagnostic["offset"],
    }
    node_bytes = model.graph.node[1].SerializeToString()
    data = path.read_bytes()
    assert data[diagnostic["offset"]] == 0x0A and data.find(node_bytes) > diagnostic["offset"]


def test_warnings_alone_exit_0(tmp_path: Path) -> None:
    path = _save(tmp_path, [helper.make_node("Mystery", ["x"], ["y"], domain="com.example")], {"": 21, "com.example": 1})
    result = _run("check", str(path))
    assert result.returncode == 0, result.stderr
    assert [(d["severity"], d["code"]) for d in json.loads(result.stdout)["diagnostics"]] == [("warning", "domain-not-checked")]


def test_a_refused_file_is_refused_as_dump_refuses_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x08\x07\x3a\x09\x0a\x05")
    checked, dumped = _run("check", str(path)), _run("dump", str(path))
    assert checked.returncode == dumped.returncode == 2
    assert checked.stdout == ""
    assert checked.stderr == dumped.stderr
    assert json.loads(checked.stderr)["kind"] == "Malformed"


def test_external_data_dir_is_accepted(tmp_path: Path) -> None:
    weight = helper.make_tensor("w", TensorProto.FLOAT, [2], struct.pack("<2f", 1.0, 2.0), raw=True)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin", size_threshold=0)
    moved = tmp_path / "data"
    moved.mkdir()
    (tmp_path / "w.bin").rename(moved / "w.bin")
    assert _run("check", str(tmp_path / "m.onnx")).returncode == 2
    result = _run("check", str(tmp_path / "m.onnx"), "--external-data-dir", str(moved))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"diagnostics": []}
