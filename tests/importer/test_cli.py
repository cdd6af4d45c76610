"""The command line, run as a real process: dump, summary, refusals, the compare tool."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import onnx_dump
from onnx import TensorProto, helper
from support.paths import REPO


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "importer", *args], capture_output=True, text=True, cwd=REPO, timeout=120)


def _model(tmp_path: Path) -> Path:
    weight = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [weight],
    )
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], producer_name="tests"), path)
    return path


def test_dump_writes_the_reference_dump_and_exits_0(tmp_path: Path) -> None:
    path = _model(tmp_path)
    result = _run("dump", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout == onnx_dump.dump_model(path)
    assert result.stderr == ""


def test_a_refused_model_writes_one_json_line_to_stderr_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x08\x07\x3a\x09\x0a\x05")  # ir_version 7, then a graph whose length overruns
    result = _run("dump", str(path))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    error = json.loads(lines[0])
    assert error == {
        "kind": "Malformed",
        "message": "length 9 exceeds the 2 bytes remaining",
        "input": str(path),
        "offset": 2,
        "field_path": "ModelProto",
    }


def test_a_missing_file_is_an_io_refusal(tmp_path: Path) -> None:
    result = _run("summary", str(tmp_path / "absent.onnx"))
    assert result.returncode == 2
    assert json.loads(result.stderr)["kind"] == "Io"


def test_max_nesting_is_applied_and_range_checked(tmp_path: Path) -> None:
    path = _model(tmp_path)
    assert _run("dump", str(path), "--max-nesting", "8").returncode == 0
    too_shallow = _run("dump", str(path), "--max-nesting", "7")
    assert too_shallow.returncode == 2 and "8 to 250" in too_shallow.stderr


def test_summary_describes_the_resolved_graph(tmp_path: Path) -> None:
    result = _run("summary", str(_model(tmp_path)))
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["producer"] == {"name": "tests", "version": ""}
    assert summary["opsets"] == [{"domain": "", "version": 21}]
    graph = summary["graph"]
    assert graph["node_count"] == 1 and graph["op_types"] == {"Add": 1}
    assert graph["inputs"] == [{"name": "x", "type": {"kind": "tensor", "elem_type": "FLOAT", "shape": ["N", 2]}}]
    (weight,) = graph["initializers"]
    assert weight["name"] == "w" and weight["byte_length"] == 8 and weight["location"] == {"source": "float_data"}
    assert graph["nodes_were_reordered"] is False and graph["subgraph_count"] == 0


def test_compare_tool_counts_matches_over_a_folder(backend_dir: Path) -> None:
    result = subprocess.run(
        ["bash", str(REPO / "tools" / "compare_onnx_dump.sh"), str(backend_dir / "simple")],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    last = result.stdout.strip().splitlines()[-1]
    count = len(list((backend_dir / "simple").rglob("*.onnx")))
    assert last.startswith(f"matched {count} of {count}"), last
