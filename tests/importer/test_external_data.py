"""External data (docs/import-rules.md §5) and memory (§6) on real files.

Links inside and out, devices, FIFOs (never waited on), a file swapped
between its check and its opening, hard links (refused unless allowed), one
mapping per file, the cap on distinct files, bytes and stream inputs, mappings
released on close, and a file truncated under its mapping.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support.paths import REPO

from importer import ErrorKind, Limits, ModelImportError, Tensor, external_locations, load_model, load_model_bytes, load_model_stream
from importer.errors import HARD_LINKED


def _external(name: str, location: str, dims: list[int], offset: int | None = None) -> TensorProto:
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims, data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", None if offset is None else str(offset))):
        if value is not None:
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
    return tensor


def _write_model(folder: Path, tensors: list[TensorProto], name: str = "model.onnx") -> Path:
    outputs = [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, None) for t in tensors]
    graph = helper.make_graph([], "g", [], outputs, tensors)
    path = folder / name
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString())
    return path


def _refusal(path: Path, **options: object) -> ModelImportError:
    with pytest.raises(ModelImportError) as refused:
        load_model(path, **options)  # type: ignore[arg-type]
    return refused.value


@pytest.fixture()
def weights() -> np.ndarray:
    return np.arange(24, dtype=np.float32)


def test_tensors_of_one_file_share_one_mapping(tmp_path: Path, weights: np.ndarray) -> None:
    (tmp_path / "w.bin").write_bytes(weights.tobytes())
    path = _write_model(tmp_path, [_external("a", "w.bin", [2, 3]), _external("b", "./w.bin", [3, 3], offset=24)])
    with load_model(path) as model:
        a, b = model.proto.graph.initializer  # type: ignore[union-attr]
        np.testing.assert_array_equal(a.to_numpy().reshape(-1), weights[:6])
        np.testing.assert_array_equal(b.to_numpy().reshape(-1), weights[6:15])
        assert len(model.owners) == 2  # the model file and w.bin, once
        view_a, view_b = a.data, b.data
        assert view_a.obj is view_b.obj
        assert (b.data_file, b.data_offset) == ("w.bin", 24)
        view_a.release()
        view_b.release()


def test_a_link_inside_the_directory_is_followed(tmp_path: Path, weights: np.ndarray) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "real.bin").write_bytes(weights.tobytes())
    (tmp_path / "alias.bin").symlink_to("data/real.bin")
    with load_model(_write_model(tmp_path, [_external("a", "alias.bin", [24])])) as model:
        np.testing.assert_array_equal(model.graph.values["a"].initializer.to_numpy(), weights)  # type: ignore[union-attr]


def test_a_link_to_a_device_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "zero.bin").symlink_to("/dev/zero")
    error = _refusal(_write_model(tmp_path, [_external("a", "zero.bin", [4])]))
    assert error.kind == ErrorKind.EXTERNAL_DATA
    assert error.field_path == "ModelProto.graph.initializer[0]"
    assert "outside" in error.message or "not a regular file" in error.message


def test_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.bin")
    path = _write_model(tmp_path, [_external("a", "pipe.bin", [4])])
    script = f"from importer import load_model\ntry:\n    load_model({str(path)!r})\nexcept Exception as e:\n    print(e.kind)"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=20)
    assert result.stdout.strip() == "ExternalData", result.stderr


def test_a_file_swapped_between_check_and_open_is_refused(tmp_path: Path, weights: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "w.bin").write_bytes(weights.tobytes())
    (tmp_path / "other.bin").write_bytes(weights.tobytes())
    path = _write_model(tmp_path, [_external("a", "w.bin", [24])])
    real_stat = os.stat

    def stat_then_swap(target: object, *args: object, **kwargs: object) -> os.stat_result:
        result = real_stat(target, *args, **kwargs)  # type: ignore[arg-type]
        if str(target).endswith("w.bin"):
            os.replace(tmp_path / "other.bin", tmp_path / "w.bin")  # a new inode at the checked path
        return result

    monkeypatch.setattr("importer.source.os.stat", stat_then_swap)
    error = _refusal(path)
    assert error.kind == ErrorKind.EXTERNAL_DATA
    assert "changed between its check and its opening" in error.message


def test_hard_links_are_refused_unless_allowed(tmp_path: Path, weights: np.ndarray) -> None:
    (tmp_path / "w.bin").write_bytes(weights.tobytes())
    os.link(tmp_path / "w.bin", tmp_path / "second-name.bin")
    path = _write_model(tmp_path, [_external("a", "w.bin", [24])])
    error = _refusal(path)
    assert error.kind == ErrorKind.EXTERNAL_DATA and "2 hard links" in error.message
    with load_model(path, limits=Limits(allow_hard_links=True)) as model:
        np.testing.assert_array_equal(model.graph.values["a"].initializer.to_numpy(), weights)  # type: ignore[union-attr]


def test_a_hard_linked_model_file_is_refused_unless_allowed(tmp_path: Path, weights: np.ndarray) -> None:
    (tmp_path / "w.bin").write_bytes(weights.tobytes())
    path = _write_model(tmp_path, [_external("a", "w.bin", [24])])
    os.link(path, tmp_path / "other-name.onnx")
    with pytest.raises(ModelImportError) as caught:
        load_model(path)
    assert caught.value.kind == ErrorKind.IO and caught.value.reason == HARD_LINKED and "2 hard links" in caught.value.message
    with load_model(path, limits=Limits(allow_hard_links=True)) as model:
        identity = model.owners[0].identity
        assert identity is not None and identity.links == 2 and identity.path == os.path.realpath(path)
        assert model.owners[0].sha256() == hashlib.sha256(Path(path).read_bytes()).hexdigest()
        external = model.owners[1].identity
        assert external is not None and (external.size, external.inode) == (weights.nbytes, os.stat(tmp_path / "w.bin").st_ino)


def test_the_number_of_external_files_is_capped(tmp_path: Path) -> None:
    tensors = []
    for index in range(3):
        (tmp_path / f"w{index}.bin").write_bytes(bytes(16))
        tensors.append(_external(f"t{index}", f"w{index}.bin", [4]))
    path = _write_model(tmp_path, tensors)
    load_model(path, limits=Limits(max_external_files=3)).close()
    error = _refusal(path, limits=Limits(max_external_files=2))
    assert error.kind == ErrorKind.EXTERNAL_DATA
    assert "max_external_files=2" in error.message
    assert error.field_path == "ModelProto.graph.initializer[2]"


def test_bytes_and_streams_read_external_data_only_from_a_named_directory(tmp_path: Path, weights: np.ndarray) -> None:
    (tmp_path / "w.bin").write_bytes(weights.tobytes())
    path = _write_model(tmp_path, [_external("a", "w.bin", [24])])
    data = path.read_bytes()
    with pytest.raises(ModelImportError) as refused:
        load_model_bytes(data)
    assert refused.value.kind == ErrorKind.EXTERNAL_DATA
    with load_model_bytes(data, external_data_dir=tmp_path) as model:
        np.testing.assert_array_equal(model.graph.values["a"].initializer.to_numpy(), weights)  # type: ignore[union-attr]
    with path.open("rb") as stream, load_model_stream(stream, external_data_dir=tmp_path) as model:
        assert model.graph.values["a"].initializer.sha256() == hashlib.sha256(weights.tobytes()).hexdigest()  # type: ignore[union-attr]


def _mapped_paths() -> str:
    return Path("/proc/self/maps").read_text()


def test_close_releases_every_mapping(tmp_path: Path) -> None:
    big = np.random.default_rng(1).standard_normal(600_000).astype(np.float32)  # 2.4 MB: mapped
    (tmp_path / "big.bin").write_bytes(big.tobytes())
    path = _write_model(tmp_path, [_external("a", "big.bin", [600_000])])
    model = load_model(path)
    tensor = model.graph.values["a"].initializer
    assert isinstance(tensor, Tensor)
    np.testing.assert_array_equal(tensor.to_numpy(), big)
    assert str(tmp_path / "big.bin") in _mapped_paths()
    model.close()
    assert str(tmp_path / "big.bin") not in _mapped_paths()
    with pytest.raises(ModelImportError) as refused:
        tensor.to_numpy()
    assert refused.value.kind == ErrorKind.IO


def test_a_file_truncated_under_its_mapping_is_refused_on_the_next_read(tmp_path: Path) -> None:
    big = np.ones(600_000, dtype=np.float32)
    (tmp_path / "big.bin").write_bytes(big.tobytes())
    path = _write_model(tmp_path, [_external("a", "big.bin", [600_000])])
    with load_model(path) as model:
        tensor = model.graph.values["a"].initializer
        assert isinstance(tensor, Tensor)
        os.truncate(tmp_path / "big.bin", 1000)
        with pytest.raises(ModelImportError) as refused:
            tensor.to_numpy()
        assert refused.value.kind == ErrorKind.IO
        assert "shrank" in refused.value.message


def test_a_view_held_while_the_file_is_truncated_ends_the_process_loudly(tmp_path: Path) -> None:
    """Documented limit: a view handed out before truncation faults (SIGBUS)."""
    big = np.ones(600_000, dtype=np.float32)
    (tmp_path / "big.bin").write_bytes(big.tobytes())
    path = _write_model(tmp_path, [_external("a", "big.bin", [600_000])])
    script = textwrap.dedent(f"""
        import os
        from importer import load_model
        model = load_model({str(path)!r})
        view = model.graph.values["a"].initializer.data
        os.truncate({str(tmp_path / "big.bin")!r}, 0)
        print(sum(view[-4096:]))
    """)
    result = subprocess.run([sys.executable, "-X", "faulthandler", "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == -signal.SIGBUS
    assert "Bus error" in result.stderr


def test_the_model_file_itself_is_mapped_and_released(tmp_path: Path) -> None:
    weights = np.zeros(400_000, dtype=np.float32)
    graph = helper.make_graph([], "g", [], [], [onnx.numpy_helper.from_array(weights, "w")])
    path = tmp_path / "inline.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    model = load_model(path)
    assert str(path) in _mapped_paths()
    model.close()
    assert str(path) not in _mapped_paths()


def test_an_external_tensor_in_a_function_body_is_placed_exactly(tmp_path: Path) -> None:
    constant = helper.make_node("Constant", [], ["c"], value=_external("c", "missing.bin", [2]))
    function = helper.make_function("local", "F", [], ["c"], [constant], [helper.make_opsetid("", 21)])
    path = _write_model(tmp_path, [])
    model = onnx.load(path)
    model.functions.append(function)
    onnx.save(model, path)
    error = _refusal(path)
    assert error.kind == ErrorKind.EXTERNAL_DATA
    assert error.field_path == "ModelProto.functions[0].node[0].attribute[0].t"


def test_external_locations_lists_the_files_a_model_names_without_reading_them(tmp_path: Path) -> None:
    """What a caller that must fetch the files first (a data root in a bucket) learns: each file
    once, normalized, in the order the tensors first name them; nothing opened but the model."""
    tensors = [_external("a", "w/one.bin", [2]), _external("b", "./two.bin", [2]), _external("c", "w//one.bin", [2], offset=8)]
    path = _write_model(tmp_path, tensors)  # none of the files exists
    assert external_locations(path) == ["w/one.bin", "two.bin"]
    assert external_locations(_write_model(tmp_path, [], "plain.onnx")) == []


def test_external_locations_refuses_what_an_import_refuses(tmp_path: Path) -> None:
    for location in ("../outside.bin", "/etc/passwd", ""):
        with pytest.raises(ModelImportError) as refused:
            external_locations(_write_model(tmp_path, [_external("t", location, [2])]))
        assert refused.value.kind is ErrorKind.EXTERNAL_DATA and refused.value.field_path is not None
    many = _write_model(tmp_path, [_external(f"t{i}", f"f{i}.bin", [1]) for i in range(3)])
    with pytest.raises(ModelImportError, match="max_external_files=2"):
        external_locations(many, limits=Limits(max_external_files=2))
    (tmp_path / "broken.onnx").write_bytes(b"\x0a\xff\xff\xff")
    with pytest.raises(ModelImportError):
        external_locations(tmp_path / "broken.onnx")
