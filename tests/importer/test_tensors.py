"""Tensors: element types, byte lengths, typed-field conversions, views and copies.

Read from real files on disk, as in production, and compared with onnx's own
numpy_helper (numpy dtypes, and ml_dtypes bit patterns for the types numpy
lacks). Also the worked byte examples of docs/import-rules.md §3a and the
memory rules of §6: values are views into the file (read, or mapped above
1 MiB) and reading after close() raises our error.
"""

from __future__ import annotations

import math
import mmap
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.hostile_cases import varint

from importer import DataType, ErrorKind, ModelImportError, Tensor, load_model, load_tensor, load_tensor_bytes
from importer.element_types import TYPED_FIELD, TYPED_FIELD_NAMES, bits_per_element, numpy_dtype_for

NUMPY_NATIVE = [1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15]
BIT_PATTERN_TYPES = [16, 17, 18, 19, 20, 23, 24, 27, 28]  # compared as bit patterns
SMALL_INT_TYPES = [21, 22, 25, 26]  # unpacked one element per byte


def _model_with(tensor: TensorProto, path: Path) -> Path:
    graph = helper.make_graph([], "g", [], [helper.make_tensor_value_info(tensor.name, tensor.data_type, None)], [tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.save(model, path)
    return path


def _initializer(path: Path) -> tuple[Tensor, np.ndarray]:
    """The first initializer and a copy of its values, read while the model is open."""
    with load_model(path) as model:
        tensor = model.proto.graph.initializer[0] if model.proto.graph else None
        assert tensor is not None
        if tensor.data_type == DataType.STRING:
            return tensor, np.array(tensor.strings)
        assert len(tensor.data) == tensor.byte_length
        return tensor, tensor.to_numpy()


def _reference_values(reference: np.ndarray, data_type: int) -> np.ndarray:
    if data_type in BIT_PATTERN_TYPES:
        return reference.view(np.uint16 if reference.dtype.itemsize == 2 else np.uint8)
    if data_type in SMALL_INT_TYPES:
        return reference.astype(np.int8 if data_type in (22, 26) else np.uint8)
    return reference


@pytest.mark.parametrize("data_type", range(1, 29))
@pytest.mark.parametrize("raw", [True, False])
def test_every_element_type_reads_like_onnx(tmp_path: Path, data_type: int, raw: bool) -> None:
    if data_type == TensorProto.STRING:
        values: list[Any] = [b"a", b"", b"\xff\x00", b"long string", b"x", b"y"]
        raw = False
    elif data_type in (TensorProto.BOOL,):
        values = [True, False, True, True, False, False]
    elif data_type in (1, 10, 11, 14, 15, 16, 17, 18, 19, 20, 23, 24, 27, 28):
        values = [0.5, -1.0, 2.0, 0.25, 1.5, 3.0] if data_type != 24 else [0.5, 1.0, 2.0, 4.0, 0.25, 8.0]
        if data_type in (14, 15):
            values = [complex(v, -v) for v in values]
    else:
        values = [1, 0, 1, 1, 0, 1] if data_type in (21, 25) else [1, -1, 0, 1, -2, 1]
        if data_type in (2, 4, 12, 13):
            values = [abs(int(str(v))) for v in values]
    tensor = helper.make_tensor("w", data_type, [2, 3], values)
    if raw:
        tensor = numpy_helper.from_array(numpy_helper.to_array(tensor), "w")
        assert tensor.HasField("raw_data")
    path = _model_with(tensor, tmp_path / "model.onnx")
    ours, array = _initializer(path)
    assert ours.data_type == data_type
    assert ours.dims == (2, 3)
    assert ours.element_count == 6
    expected_length = 0 if data_type == 8 else math.ceil(6 * bits_per_element(DataType(data_type)) / 8)
    assert ours.byte_length == expected_length
    if data_type == TensorProto.STRING:  # bytes kept as written (numpy_helper would refuse b"\xff")
        assert ours.strings == list(onnx.load(path).graph.initializer[0].string_data)
        return
    reference = numpy_helper.to_array(onnx.load(path).graph.initializer[0])
    assert array.dtype == numpy_dtype_for(DataType(data_type))
    assert array.shape == (2, 3)
    np.testing.assert_array_equal(array, _reference_values(reference, data_type))
    assert ours.source == ("raw_data" if raw else TYPED_FIELD_NAMES[TYPED_FIELD[DataType(data_type)]])


def test_float16_is_native_and_bfloat16_is_a_bit_pattern(tmp_path: Path) -> None:
    half = _model_with(numpy_helper.from_array(np.array([0.5, -2.0], dtype=np.float16), "h"), tmp_path / "h.onnx")
    _tensor, array = _initializer(half)
    assert array.dtype == np.float16
    assert array.tolist() == [0.5, -2.0]
    bf16 = _model_with(helper.make_tensor("b", TensorProto.BFLOAT16, [1], [1.0]), tmp_path / "b.onnx")
    _, array = _initializer(bf16)
    assert array.dtype == np.uint16
    assert array.tolist() == [0x3F80]


# --- the worked examples of docs/import-rules.md §3a, byte for byte


def test_worked_example_string_tensor() -> None:
    tensor = load_tensor_bytes(bytes.fromhex("08 02 10 08 32 03 61 62 63 32 03 64 65 66 42 01 78"))
    assert (tensor.name, tensor.data_type, tensor.dims) == ("x", DataType.STRING, (2,))
    assert tensor.strings == [b"abc", b"def"]


def test_worked_example_float16_raw_data() -> None:
    header = bytes.fromhex("08 03 08 04 10 0A 42 06 6F 75 74 70 75 74 4A 18")
    raw = bytes.fromhex("64 38") + bytes(22)
    tensor = load_tensor_bytes(header + raw)
    assert (tensor.name, tensor.data_type, tensor.dims, tensor.byte_length) == ("output", DataType.FLOAT16, (3, 4), 24)
    assert float(tensor.to_numpy()[0, 0]) == pytest.approx(0.548828, abs=1e-6)


def test_worked_example_int4_in_int32_data() -> None:
    # dims 5, 5; INT4; int32_data packed: 13 entries, the first 136 (0x88): both nibbles -8.
    entries = [136] + [0x21] * 12
    packed = b"".join(bytes([v]) if v < 0x80 else bytes([v & 0x7F | 0x80, v >> 7]) for v in entries)
    data = bytes.fromhex("08 05 08 05 10 16 2A") + bytes([len(packed)]) + packed
    tensor = load_tensor_bytes(data)
    assert tensor.byte_length == 13
    assert bytes(tensor.data)[:2] == b"\x88\x21"
    values = tensor.to_numpy().reshape(-1)
    assert values[:4].tolist() == [-8, -8, 1, 2]
    assert len(values) == 25


@pytest.mark.parametrize(
    ("data_type", "entries", "raw"),
    [
        (TensorProto.FLOAT16, [14336], b"\x00\x38"),  # 0.5 as its bit pattern
        (TensorProto.BOOL, [5, 0, -1], b"\x01\x00\x01"),  # any non-zero entry is 1
        (TensorProto.UINT8, [-1, 256 + 7], b"\xff\x07"),  # the low 8 bits
        (TensorProto.INT16, [-2, 65536 + 3], b"\xfe\xff\x03\x00"),  # the low 16 bits
        (TensorProto.INT2, [0b11100100], b"\xe4"),  # four 2-bit elements in one entry's low byte
        (TensorProto.FLOAT6E2M3, [1, 2, 3, 4], b"\x81\x30\x10"),  # 4 elements in 3 bytes, from the lowest bit
        (TensorProto.FLOAT6E3M2, [0x41, 0xFF], b"\xc1\x0f"),  # only the low 6 bits of each entry
    ],
)
def test_int32_data_conversion_rules(data_type: int, entries: list[int], raw: bytes) -> None:
    count = 4 if data_type == TensorProto.INT2 else len(entries)
    tensor = TensorProto(name="t", data_type=data_type, dims=[count])
    tensor.int32_data.extend(entries)
    ours = load_tensor_bytes(tensor.SerializeToString())
    assert ours.source == "int32_data"
    assert bytes(ours.data) == raw


def test_uint32_takes_the_low_32_bits_of_uint64_data() -> None:
    tensor = TensorProto(name="t", data_type=TensorProto.UINT32, dims=[2])
    tensor.uint64_data.extend([2**32 + 7, 2**64 - 1])
    assert bytes(load_tensor_bytes(tensor.SerializeToString()).data) == b"\x07\x00\x00\x00\xff\xff\xff\xff"


def test_dims_as_one_packed_field_and_typed_values_one_at_a_time() -> None:
    # dims [2, 3] packed (0A 02 02 03); FLOAT; float_data unpacked (25 <4 bytes>) six times.
    floats = b"".join(b"\x25" + np.float32(v).tobytes() for v in range(6))
    tensor = load_tensor_bytes(bytes.fromhex("0A 02 02 03 10 01") + floats)
    assert tensor.dims == (2, 3)
    assert tensor.to_numpy().reshape(-1).tolist() == [0, 1, 2, 3, 4, 5]


def test_a_tensor_with_no_elements_hashes_the_empty_string() -> None:
    tensor = load_tensor_bytes(bytes.fromhex("08 00 08 05 10 01"))
    assert tensor.element_count == 0
    assert tensor.sha256() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


# --- memory: views, mapping, close


def test_raw_data_is_a_view_into_the_read_file(tmp_path: Path) -> None:
    weights = np.arange(1000, dtype=np.float32)
    path = _model_with(numpy_helper.from_array(weights, "w"), tmp_path / "small.onnx")
    with load_model(path) as model:
        tensor = model.proto.graph.initializer[0]  # type: ignore[union-attr]
        view = tensor.data
        assert isinstance(view.obj, bytes)  # the whole file, read once
        assert len(view.obj) == path.stat().st_size
        assert view.readonly
        assert bytes(view) == weights.tobytes()
        assert tensor.data_file == str(path)
        assert tensor.data_offset is not None
        assert path.read_bytes()[tensor.data_offset : tensor.data_offset + 4000] == weights.tobytes()
        view.release()


def test_a_model_over_1_mib_is_mapped_not_read(tmp_path: Path) -> None:
    weights = np.random.default_rng(0).standard_normal(400_000).astype(np.float32)  # 1.6 MB
    path = _model_with(numpy_helper.from_array(weights, "w"), tmp_path / "large.onnx")
    with load_model(path) as model:
        tensor = model.proto.graph.initializer[0]  # type: ignore[union-attr]
        view = tensor.data
        assert isinstance(view.obj, mmap.mmap)
        np.testing.assert_array_equal(tensor.to_numpy(), weights)
        view.release()


def test_reading_tensor_data_after_close_raises_our_error(tmp_path: Path) -> None:
    path = _model_with(numpy_helper.from_array(np.ones(10, np.float32), "w"), tmp_path / "m.onnx")
    model = load_model(path)
    tensor = model.proto.graph.initializer[0]  # type: ignore[union-attr]
    model.close()
    with pytest.raises(ModelImportError) as refused:
        tensor.to_numpy()
    assert refused.value.kind == ErrorKind.IO
    assert "closed" in refused.value.message
    model.close()  # idempotent


def test_tensor_file_reader_reads_files_from_disk(tmp_path: Path) -> None:
    path = tmp_path / "t.pb"
    path.write_bytes(numpy_helper.from_array(np.array([[1, 2], [3, 4]], dtype=np.int64), "t").SerializeToString())
    tensor = load_tensor(path)
    assert tensor.to_numpy().tolist() == [[1, 2], [3, 4]]


def test_an_oversized_typed_field_is_refused_before_it_is_decoded() -> None:
    """50 MB of int32_data for a 1-element tensor: counted, not converted."""
    import tracemalloc

    entries = 50_000_000
    data = bytes.fromhex("08 01 10 06 2A") + varint(entries) + b"\x01" * entries
    tracemalloc.start()
    try:
        with pytest.raises(ModelImportError) as refused:
            load_tensor_bytes(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert refused.value.kind == ErrorKind.INVALID_MODEL
    assert refused.value.message == f"int32_data has {entries} entries, expected 1"
    assert peak < 2 * entries  # one byte-per-byte pass, not the decoder's ~40 bytes per entry
