"""Fuzzing in the suite: past findings stay fixed, and a short smoke run of
each atheris target (tools/run_fuzz.sh) finds nothing new.

Findings live in tests/support/fuzz_findings/<target>-<what>.<ext>, each the exact
input libFuzzer wrote; the invariant is the fuzzers' own: nothing but
ModelImportError escapes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.paths import REPO, SUPPORT

from importer import ModelImportError, load_model_bytes, load_tensor_bytes
from importer.dump import render_dump
from importer.summary import summarize

FINDINGS = sorted((SUPPORT / "fuzz_findings").iterdir())
SMOKE_SECONDS = 10


@pytest.mark.parametrize("finding", FINDINGS, ids=[path.name for path in FINDINGS])
def test_fuzz_finding_raises_only_our_error(finding: Path) -> None:
    data = finding.read_bytes()
    try:
        if finding.name.startswith("tensor-"):
            tensor = load_tensor_bytes(data)
            tensor.sha256()
            tensor.to_numpy()
        else:
            with load_model_bytes(data) as model:
                render_dump(model.proto)
                summarize(model)
    except ModelImportError as error:
        assert len(str(error)) < 1000


def test_empty_tensor_with_dims_numpy_cannot_hold_is_unsupported() -> None:
    # dims [0, 2^62, 4], UINT8, no data: valid (0 elements), but numpy cannot make that shape
    tensor = load_tensor_bytes(bytes.fromhex("08 00 08 80 80 80 80 80 80 80 80 40 08 04 10 02"))
    assert tensor.element_count == 0
    with pytest.raises(ModelImportError) as refused:
        tensor.to_numpy()
    assert refused.value.kind == "Unsupported"


@pytest.mark.parametrize("target", ["model", "tensor"])
def test_fuzz_smoke_run_finds_nothing(target: str) -> None:
    pytest.importorskip("atheris", reason="atheris is installed by tools/dev.sh on Python 3.11")
    result = subprocess.run(
        ["bash", str(REPO / "tools" / "run_fuzz.sh"), target, str(SMOKE_SECONDS)],
        capture_output=True, text=True, cwd=REPO, timeout=SMOKE_SECONDS + 240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "stat::number_of_executed_units" in result.stderr
