"""The operator check against onnx.checker, on every model there is to hand.

- Every ONNX backend test model (the sweep's list) and every model the
  tests export with torch (the cached `.cache/torch-exports`, see
  tools/export_torch_models.py) that `onnx.checker.check_model` accepts gives
  no error diagnostic, unless it is named below with the reason.
- Random models (tests/support/model_strategies.py) never make the check fail, every
  diagnostic is placed on the field it names, and a model the checker accepts
  has no error beyond the deliberate differences.

Deliberate differences (importer/check.py lists them all): the input-type
rules are those of `check_model(full_check=True)`, whose type inference
refuses what the plain checker lets through; such a model is named here, and
the test requires full_check to refuse it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import export_torch_models as exports_tool
import onnx
import onnx.checker
import pytest
from hypothesis import HealthCheck, given, settings
from support.model_strategies import models, serialize
from test_check_places import assert_placed, check_bytes

from importer import Code, Diagnostic, Severity, check_model, load_model

# Codes whose rule is full_check's type inference, not the plain checker's.
FULL_CHECK_CODES = frozenset({Code.INPUT_TYPE, Code.INPUT_TYPES_DIFFER, Code.CONSTANT_VALUE})

# Models the plain checker accepts and we give errors, on purpose: case -> why.
EXPECTED_BACKEND_ERRORS: dict[str, str] = {}
EXPECTED_EXPORT_ERRORS = {
    "cnn-dynamo-bfloat16": (
        "input-type: the dynamo exporter feeds bfloat16 tensors to Conv, MaxPool and GlobalAveragePool, whose type "
        "constraints at opset 18 allow float16, float and double only; check_model(full_check=True) refuses it alike"
    ),
}


def _checker(model: onnx.ModelProto | str, full_check: bool = False) -> str | None:
    try:
        onnx.checker.check_model(model, full_check=full_check)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
        return str(error).splitlines()[0]
    return None


def _errors(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in diagnostics if d.severity is Severity.ERROR]


def _differences(path: Path, checker_verdict: str | None, diagnostics: list[Diagnostic]) -> str | None:
    """How our verdict differs from the checker's on a model it accepts, or None."""
    errors = _errors(diagnostics)
    if checker_verdict is not None or not errors:
        return None
    codes = sorted({d.code.value for d in errors})
    return f"{codes} at {errors[0].field_path}: {errors[0].message}"


def test_every_backend_model_the_checker_accepts_has_no_error(
    backend_dir: Path, backend_manifest: dict[str, Any], report: list[str]
) -> None:
    models_list = backend_manifest["models"]
    assert len(models_list) > 1900
    unexpected: dict[str, str] = {}
    accepted = refused_by_both = refused_by_checker_only = warned = 0
    seconds = 0.0
    for relative in models_list:
        path = backend_dir / relative
        verdict = _checker(str(path))
        start = time.perf_counter()
        with load_model(path) as model:
            diagnostics = check_model(model)
        seconds += time.perf_counter() - start
        warned += any(d.severity is Severity.WARNING for d in diagnostics)
        if verdict is None:
            accepted += 1
            difference = _differences(path, verdict, diagnostics)
            if difference is not None and relative not in EXPECTED_BACKEND_ERRORS:
                unexpected[relative] = difference
        elif _errors(diagnostics):
            refused_by_both += 1
        else:
            refused_by_checker_only += 1
    report.append(
        f"check: {len(models_list)} backend models, {accepted} accepted by onnx.checker, {refused_by_both} refused by both, "
        f"{refused_by_checker_only} refused by the checker only, {warned} with warnings; import+check {seconds:.2f}s"
    )
    assert unexpected == {}
    for relative, reason in EXPECTED_BACKEND_ERRORS.items():
        assert _checker(str(backend_dir / relative), full_check=True) is not None, (relative, reason)


def _exported_models() -> dict[str, Path]:
    """The cases of tools/export_torch_models.py, exported (cached in
    .cache/torch-exports, shared with tests/importer/test_exporters.py) where torch is installed."""
    pytest.importorskip("torch", reason="torch is not installed: the real-exporter models cannot be made")
    exports_tool.export_all()
    found = {}
    for folder in sorted(exports_tool.DEFAULT_OUT.glob("*")):
        record = folder / exports_tool.RECORD
        if record.exists() and json.loads(record.read_text()).get("status") == "ok" and (folder / exports_tool.MODEL_FILE).exists():
            found[folder.name] = folder / exports_tool.MODEL_FILE
    return found


def test_every_exported_model_the_checker_accepts_has_no_error_but_the_named_ones(report: list[str]) -> None:
    exported = _exported_models()
    assert exported, "torch is installed, yet no case was exported"
    differences: dict[str, str] = {}
    for name, path in exported.items():
        verdict = _checker(str(path))
        with load_model(path) as model:
            diagnostics = check_model(model)
        difference = _differences(path, verdict, diagnostics)
        if difference is not None:
            differences[name] = difference
            assert {d.code for d in _errors(diagnostics)} <= FULL_CHECK_CODES, (name, difference)
            assert _checker(str(path), full_check=True) is not None, name
    report.append(f"check: {len(exported)} torch exports, {len(differences)} with a deliberate difference: {sorted(differences)}")
    assert set(differences) == set(EXPECTED_EXPORT_ERRORS) & set(exported), differences


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(models())
def test_random_models_are_checked_and_every_diagnostic_is_placed(model: Any) -> None:
    data = serialize(model)
    diagnostics = check_bytes(data)
    parsed = onnx.ModelProto.FromString(data)
    offsets = [d.offset for d in diagnostics]
    assert offsets == sorted(offsets)
    for diagnostic in diagnostics:
        assert_placed(data, parsed, diagnostic)
    if _checker(parsed) is None:
        extra = {d.code for d in _errors(diagnostics)}
        assert extra <= FULL_CHECK_CODES, [d.as_dict() for d in _errors(diagnostics)]
        if extra:
            assert _checker(parsed, full_check=True) is not None


def test_verdicts_shared_across_models_stay_bounded_and_change_no_answer(tmp_path: Path) -> None:
    """Models with the same opset imports share their ops' verdicts (importer/check.py):
    a model of 5,000 made-up ops of a custom domain leaves at most 4,096 kept for
    that domain, and the next model (the same imports, one known op used wrongly,
    one made-up op) gets the same diagnostics as in a process that never saw
    the first."""
    from onnx import TensorProto, helper

    from importer import check as check_module

    def save(nodes: list[onnx.NodeProto], name: str) -> Path:
        graph = helper.make_graph(
            nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
        )  # fmt: skip
        opsets = [helper.make_opsetid("", 21), helper.make_opsetid("made.up", 1)]
        path = tmp_path / name
        onnx.save(helper.make_model(graph, opset_imports=opsets), path)
        return path

    chain = [helper.make_node(f"Op{i}", ["x" if i == 0 else f"v{i}"], [f"v{i + 1}"], domain="made.up") for i in range(5000)]
    probe = save([helper.make_node("Relu", ["x"], ["r"], alpha=1.0), helper.make_node("Op7", ["r"], ["y"], domain="made.up")], "probe.onnx")

    def diagnostics(path: Path) -> list[tuple[str, str | None, str]]:
        with load_model(path) as model:
            return [(d.code.value, d.field_path, d.message) for d in check_model(model)]

    check_module._SHARED_VERDICTS.clear()
    fresh = diagnostics(probe)
    check_module._SHARED_VERDICTS.clear()
    [(code, _, message)] = diagnostics(save(chain, "chain.onnx"))
    assert code == Code.DOMAIN_NOT_CHECKED.value and message.startswith("5000 node(s)")
    kept = [len(by_op) for _, verdicts in check_module._SHARED_VERDICTS.values() for by_op in verdicts.values()]
    assert kept and max(kept) <= 4096
    assert diagnostics(probe) == fresh and any(code == Code.UNKNOWN_ATTRIBUTE.value for code, _, _ in fresh)
