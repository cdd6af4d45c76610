"""Property tests: random models, every prefix, random byte flips.

- Random valid models written with onnx read back with dumps byte-identical to
  the reference writer's (tools/onnx_dump.py), also with their top-level
  fields in a shuffled order.
- Every proper prefix of a valid model is refused: Malformed when onnx's own
  parser refuses it too; otherwise imported, or refused as InvalidModel.
- Random byte flips and truncations never raise anything but ModelImportError.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
import onnx_dump
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.model_strategies import models, serialize

from importer import ErrorKind, ModelImportError, load_model, load_model_bytes
from importer.dump import render_dump
from importer.wire import iter_fields

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _dump_both(data: bytes) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.onnx"
        path.write_bytes(data)
        expected = onnx_dump.dump_model(path)
        with load_model(path) as model:
            return render_dump(model.proto), expected


@SETTINGS
@given(models())
def test_random_models_read_back_with_the_reference_dump(model: onnx.ModelProto) -> None:
    actual, expected = _dump_both(serialize(model))
    assert actual == expected


@SETTINGS
@given(models(), st.randoms(use_true_random=False))
def test_field_order_does_not_matter(model: onnx.ModelProto, random: object) -> None:
    data = serialize(model)
    fields = [data[at:stop] for _, at, _, stop, _ in iter_fields(data, 0, len(data))]
    random.shuffle(fields)  # type: ignore[attr-defined]
    actual, expected = _dump_both(b"".join(fields))
    assert actual == expected


def _onnx_parses(data: bytes) -> bool:
    try:
        onnx.ModelProto().ParseFromString(data)
    except Exception:
        return False
    return True


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(models())
def test_every_proper_prefix_is_refused_cleanly(model: onnx.ModelProto) -> None:
    data = serialize(model)
    for cut in range(len(data)):
        prefix = data[:cut]
        try:
            load_model_bytes(prefix).close()
        except ModelImportError as error:
            if _onnx_parses(prefix):
                assert error.kind == ErrorKind.INVALID_MODEL, (cut, error)
            else:
                assert error.kind == ErrorKind.MALFORMED, (cut, error)
                assert error.offset is not None and 0 <= error.offset <= cut
        else:
            assert _onnx_parses(prefix), f"prefix of {cut} bytes imported but is not valid protobuf"


@SETTINGS
@given(models(), st.data())
def test_random_byte_flips_raise_only_our_error(model: onnx.ModelProto, data: st.DataObject) -> None:
    original = bytearray(serialize(model))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(original) - 1))
        original[position] = data.draw(st.integers(0, 255))
    try:
        with load_model_bytes(bytes(original)) as imported:
            render_dump(imported.proto)
    except ModelImportError as error:
        assert error.kind in set(ErrorKind)
        assert len(str(error)) < 1000


def test_the_dump_of_a_refused_model_is_not_written(tmp_path: Path) -> None:
    """Sanity check of the comparison itself: a broken model is refused on both sides."""
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x08\x07\x3a\x05\x0a\x03")
    with pytest.raises(ModelImportError) as refused:
        load_model(path)
    assert refused.value.kind == ErrorKind.MALFORMED
    with pytest.raises(onnx_dump.DumpError):
        onnx_dump.dump_model(path)
