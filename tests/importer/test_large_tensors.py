"""Tensors past 2 GiB, as an option (docs/import-rules.md §3, its departure
from the specification): the specification's 2^31 - 1 bytes stays the default, decided from
the dims; `Limits.max_tensor_bytes` (the command line's `--max-tensor-bytes`)
raises it for external data only, and an external tensor then reads back
whole, at offsets past 2^31.

The external file is sparse (support.past_2gib_model): 2 GiB on no disk, and
nothing here reads more of it than its few known bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import onnx_dump
import pytest
from onnx import TensorProto, helper
from support.past_2gib_model import BIG_BYTES, ELEMENTS, MARKS, past_2gib_model
from support.paths import REPO

from importer import DataType, ErrorKind, Limits, ModelImportError, Tensor, load_model
from importer.limits import MAX_TENSOR_BYTES, MAX_TENSOR_BYTES_CEILING, parse_size

GIB = 1 << 30
INITIALIZER = "ModelProto.graph.initializer[0]"


def refusal(path: Path, limits: Limits | None = None) -> ModelImportError:
    with pytest.raises(ModelImportError) as refused:
        load_model(path, limits=limits)
    return refused.value


def test_by_default_an_external_tensor_past_2_31_bytes_is_unsupported_at_its_dims(tmp_path: Path) -> None:
    error = refusal(past_2gib_model(tmp_path))
    assert error.kind is ErrorKind.UNSUPPORTED
    assert error.field_path == f"{INITIALIZER}.dims"
    assert error.message == f"tensor needs {BIG_BYTES} bytes, more than max_tensor_bytes={2**31 - 1}"
    assert error.offset is not None


def test_with_the_limit_raised_it_imports_and_reads_past_2_31(tmp_path: Path) -> None:
    with load_model(past_2gib_model(tmp_path), limits=Limits(max_tensor_bytes=4 * GIB)) as model:
        big = model.graph.values["Big"].initializer
        assert isinstance(big, Tensor)
        assert (big.data_type, big.dims, big.byte_length) == (DataType.FLOAT, (ELEMENTS,), BIG_BYTES)
        assert (big.data_file, big.data_offset) == ("big.bin", 0)
        data = big.data
        assert len(data) == BIG_BYTES
        for offset, mark in MARKS.items():
            assert bytes(data[offset : offset + len(mark)]) == mark
        assert bytes(data[2**31 - 4 :]) == b"2GiBend!"
        assert bytes(data[GIB : GIB + 8]) == bytes(8)
        data.release()


def test_the_limit_is_inclusive(tmp_path: Path) -> None:
    path = past_2gib_model(tmp_path)
    with load_model(path, limits=Limits(max_tensor_bytes=BIG_BYTES)) as model:
        assert model.graph.values["Big"].initializer is not None
    error = refusal(path, Limits(max_tensor_bytes=BIG_BYTES - 1))
    assert (error.kind, error.field_path) == (ErrorKind.UNSUPPORTED, f"{INITIALIZER}.dims")
    assert error.message == f"tensor needs {BIG_BYTES} bytes, more than max_tensor_bytes={BIG_BYTES - 1}"


def test_a_tensor_in_the_model_file_keeps_the_specifications_limit(tmp_path: Path) -> None:
    """Decided from the dims, before its (absent) values are looked for: no inline tensor can pass 2^31 - 1."""
    error = refusal(past_2gib_model(tmp_path, inline=True), Limits(max_tensor_bytes=MAX_TENSOR_BYTES_CEILING))
    assert (error.kind, error.field_path) == (ErrorKind.UNSUPPORTED, f"{INITIALIZER}.dims")
    assert error.message.startswith(f"tensor needs {BIG_BYTES} bytes, more than 2^31-1 (held in the model file")


def test_the_external_file_must_still_hold_the_whole_tensor(tmp_path: Path) -> None:
    path = past_2gib_model(tmp_path)
    os.truncate(tmp_path / "big.bin", BIG_BYTES - 1)
    error = refusal(path, Limits(max_tensor_bytes=4 * GIB))
    assert (error.kind, error.field_path) == (ErrorKind.EXTERNAL_DATA, INITIALIZER)
    assert f"range 0+{BIG_BYTES} exceeds the {BIG_BYTES - 1} bytes" in error.message


@pytest.mark.parametrize("value", [MAX_TENSOR_BYTES - 1, MAX_TENSOR_BYTES_CEILING + 1, 0])
def test_limits_refuse_a_bound_outside_2_31_to_2_60(value: int) -> None:
    with pytest.raises(ValueError, match="max_tensor_bytes must be within 2\\^31-1 to 2\\^60"):
        Limits(max_tensor_bytes=value)


@pytest.mark.parametrize(
    ("text", "size"),
    [("4GiB", 4 * GIB), ("2147483652", BIG_BYTES), ("1.5G", 1_500_000_000), (" 3 kib ", 3072), ("0.5KiB", 512), ("1024TiB", 2**50)],
)
def test_sizes_are_read_exactly(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "GiB", "4 GiBs", "-1", "1e9", "4,5G"])
def test_what_is_not_a_size_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        parse_size(text)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "importer", *args], capture_output=True, text=True, cwd=REPO, timeout=120)


def test_the_command_line_refuses_by_default_and_reads_with_the_option(tmp_path: Path) -> None:
    path = str(past_2gib_model(tmp_path))
    refused = run_cli("summary", path)
    assert refused.returncode == 2 and refused.stdout == ""
    error = json.loads(refused.stderr)
    assert (error["kind"], error["field_path"]) == ("Unsupported", f"{INITIALIZER}.dims")
    read = run_cli("summary", path, "--max-tensor-bytes", "4GiB")
    assert read.returncode == 0, read.stderr
    (big,) = json.loads(read.stdout)["graph"]["initializers"]
    assert (big["byte_length"], big["location"]) == (BIG_BYTES, {"source": "external", "file": "big.bin", "offset": 0, "length": BIG_BYTES})


@pytest.mark.parametrize("value", ["2GiB - 1", "1GiB", "2000000TiB"])
def test_the_command_line_refuses_a_bad_bound_as_a_usage_error(tmp_path: Path, value: str) -> None:
    result = run_cli("summary", str(tmp_path / "model.onnx"), "--max-tensor-bytes", value)
    assert result.returncode == 2
    assert "--max-tensor-bytes" in result.stderr and result.stdout == ""


def test_the_dump_of_an_external_data_model_is_the_reference_whatever_the_limit(tmp_path: Path) -> None:
    weight = helper.make_tensor("w", TensorProto.FLOAT, [256], [float(i) for i in range(256)])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"])], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256])], [weight]
    )
    path = tmp_path / "model.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.save(model, path, save_as_external_data=True, location="w.bin", size_threshold=0)
    reference = onnx_dump.dump_model(path)
    for options in ((), ("--max-tensor-bytes", "4GiB")):
        result = run_cli("dump", str(path), *options)
        assert (result.returncode, result.stderr) == (0, "")
        assert result.stdout == reference
