"""Hostile inputs: every file of testdata/onnx/hostile is refused exactly as its case says.

The folder is regenerated from `hostile_cases.CASES` once per session (it is
git-ignored). Each case is loaded from its file with `load_model` and must
give its kind, byte offset and field path, with a bounded message; the same
bytes given to `load_model_bytes` must give the same refusal. Layout:
`<kind>-<case>.onnx`, or `<kind>-<case>/model.onnx` (or the `model_file` of
its `Folder`) beside the external data files the case needs.
"""

from __future__ import annotations

import mmap
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from support.hostile_cases import CASES, CONTROLS, HOSTILE_DIR, MIB, Case, Control, case_path, write_cases, write_folder

from importer import ErrorKind, Limits, ModelImportError, load_model, load_model_bytes

MAX_MESSAGE = 500
BYTE_CASES = [case for case in CASES if case.io_shape is None]


@pytest.fixture(scope="session")
def hostile_dir() -> Path:
    write_cases(HOSTILE_DIR, CASES)
    return HOSTILE_DIR


def refusal(call: Callable[[], object]) -> ModelImportError:
    with pytest.raises(ModelImportError) as info:
        call()
    return info.value


def load_case(root: Path, case: Case) -> ModelImportError:
    path = case_path(root, case)
    if case.via_bytes:
        return refusal(lambda: load_model_bytes(path.read_bytes(), name=str(path), limits=case.limits))
    return refusal(lambda: load_model(path, limits=case.limits))


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_file_is_refused_with_kind_offset_and_path(case: Case, hostile_dir: Path) -> None:
    error = load_case(hostile_dir, case)
    assert (error.kind, error.offset, error.field_path) == (case.kind, case.offset, case.path), error.message
    assert error.input_name == str(case_path(hostile_dir, case))
    assert len(error.message) < MAX_MESSAGE
    assert len(str(error)) < MAX_MESSAGE + len(error.field_path or "") + len(error.input_name)


@pytest.mark.parametrize("case", BYTE_CASES, ids=lambda case: case.name)
def test_bytes_are_refused_like_the_file(case: Case, hostile_dir: Path) -> None:
    path = case_path(hostile_dir, case)
    data = path.read_bytes()
    assert data == case.data
    directory = None if case.folder is None or case.via_bytes else path.parent
    error = refusal(lambda: load_model_bytes(data, name=case.name, external_data_dir=directory, limits=case.limits))
    assert (error.kind, error.offset, error.field_path) == (case.kind, case.offset, case.path), error.message
    assert error.input_name == case.name
    assert len(error.message) < MAX_MESSAGE


def test_messages_stay_bounded_with_1_mib_names(hostile_dir: Path) -> None:
    big = [case for case in CASES if len(case.data) > MIB]
    assert len(big) >= 6, [case.name for case in big]
    for case in big:
        error = load_case(hostile_dir, case)
        assert len(error.message) < MAX_MESSAGE, case.name
        assert len(str(error)) < 2 * MAX_MESSAGE, case.name


def test_names_carry_the_kind_and_are_unique() -> None:
    kinds = {kind.value for kind in ErrorKind}
    for case in CASES:
        prefix, _, rest = case.name.partition("-")
        assert prefix == case.kind.value, case.name
        assert prefix in kinds and rest, case.name
        assert rest == rest.lower() and " " not in rest, case.name
    assert len({case.name for case in CASES}) == len(CASES)


def test_the_folder_holds_exactly_the_cases(hostile_dir: Path) -> None:
    expected = {case_path(hostile_dir, case).relative_to(hostile_dir).parts[0] for case in CASES}
    on_disk = set(os.listdir(hostile_dir))
    assert on_disk == expected
    by_entry = {case_path(hostile_dir, case).relative_to(hostile_dir).parts[0]: case for case in CASES}
    for entry in on_disk:
        assert entry.split("-", 1)[0] == by_entry[entry].kind.value


def test_every_kind_and_rule_family_is_covered() -> None:
    per_kind = Counter(case.kind for case in CASES)
    assert len(CASES) >= 70
    assert set(per_kind) == set(ErrorKind)
    families = (
        "field-zero",
        "wire-type-3",
        "wire-type-4",
        "wire-type-6",
        "wire-type-7",
        "key-over-32-bits",
        "varint-11-bytes",
        "tenth-byte-2",
        "truncated",
        "length-exceeds",
        "length-2-63",
        "nesting",
        "utf8",
        "ir-version",
        "graph-absent",
        "attribute",
        "data-type-0",
        "data-type-29",
        "negative-dim",
        "2-60",
        "2-31",
        "raw-data",
        "segment",
        "data-location",
        "sparse",
        "input",
        "initializer",
        "output",
        "domain",
        "cycle",
        "subgraph",
        "dotdot",
        "backslash",
        "drive",
        "nul",
        "offset",
        "length-mismatch",
        "missing",
        "symlink",
        "no-directory",
    )
    missing = [family for family in families if not any(family in case.name for case in CASES)]
    assert not missing


@pytest.mark.parametrize("control", CONTROLS, ids=lambda control: control.name)
def test_controls_load(control: Control, tmp_path: Path) -> None:
    """The valid models the cases are mutations of: the refusals come from the mutations."""
    if control.folder is None:
        path = tmp_path / "model.onnx"
        path.write_bytes(control.data)
    else:
        path = write_folder(tmp_path, control.folder, control.data)
    with load_model(path, limits=control.limits) as imported:
        assert imported.graph.outputs


@pytest.mark.parametrize("control", [c for c in CONTROLS if c.onnx_checked], ids=lambda control: control.name)
def test_controls_are_valid_for_onnx(control: Control) -> None:
    """The hand-written base models are real ONNX, as the reference checker sees it."""
    onnx.checker.check_model(onnx.load_model_from_string(control.data))


@pytest.mark.parametrize("case", [case for case in CASES if case.limits is not None], ids=lambda case: case.name)
def test_limit_cases_load_with_the_default_limits(case: Case, hostile_dir: Path) -> None:
    """A case refused under a tight Limits is refused because of that limit."""
    with load_model(case_path(hostile_dir, case), limits=Limits()) as imported:
        assert imported.graph.nodes


@pytest.mark.parametrize("case", [case for case in CASES if case.via_bytes], ids=lambda case: case.name)
def test_bytes_only_cases_load_from_their_file(case: Case, hostile_dir: Path) -> None:
    """Refused as bytes only for want of a directory: the file beside its data loads."""
    with load_model(case_path(hostile_dir, case)) as imported:
        assert imported.graph.values["W"].initializer is not None


def test_file_over_2_gib_is_unsupported_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.onnx"
    with path.open("wb") as writer:
        writer.truncate(1 << 31)  # sparse: nothing is written or read
    error = refusal(lambda: load_model(path))
    assert (error.kind, error.offset, error.field_path) == (ErrorKind.UNSUPPORTED, None, None)
    seen: tuple[ErrorKind, int | None, str | None] | None = None
    with path.open("rb") as reader, mmap.mmap(reader.fileno(), 0, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as view:
        try:
            load_model_bytes(view)
        except ModelImportError as caught:  # not kept: its traceback would pin views of the mapping
            seen = (caught.kind, caught.offset, caught.field_path)
    assert seen == (ErrorKind.UNSUPPORTED, None, None)
