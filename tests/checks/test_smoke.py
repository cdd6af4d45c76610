"""The `smoke` stage (service/checks/stages/smoke.py), in process.

- Given the inputs the ONNX backend's test cases ship (test_data_set_N of
  node/, simple/, pytorch-converted/, pytorch-operator/, read with
  onnx.numpy_helper), the run produces their expected outputs within the
  backend runner's tolerances (rtol=1e-3, atol=1e-7, the same dtype, strings
  equal), on every case onnxruntime loads whose inputs and outputs are all
  tensors. Differences are listed in ALLOWED_MISMATCHES.
- On synthetic inputs every real model passes (the backend's light/ models,
  the samples, the cached torch exports).
- Synthetic inputs cover the element types onnxruntime takes (strings,
  bool, float16, bfloat16, float8 included); symbolic dimensions take 1 or
  their binding, consistently among inputs and outputs; what cannot be made
  (a sequence input) skips the stage with the reason.
- An output whose type or shape is not the declared one, and a run that
  fails, are error findings at the output's or the node's place.
- Sequences and maps are judged by their declared types: a scikit-learn
  classifier's ZipMap output (a list of dicts) passes, element by element; a
  key of another type fails at the output; a sequence that comes as an
  OrtValue is judged by its type's name.
- A dimension without a name is bound by input and axis (`x[0]`); a failed
  run or a shape unlike its declaration names the dimensions that took 1
  unbound and the binding of each; a binding the model has no place for is
  DimensionBindingError, not a stage result.
- The run has its own CPU budget: a Loop of 10^15 trips is stopped by
  onnxruntime's cancellation once the budget is used, whichever API runs it,
  and the stage is incomplete naming --smoke-cpu-seconds; a run that
  finishes within it is unaffected.
"""

from __future__ import annotations

import ctypes
import json
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.loop_models import constant_loop, graph_of_loop, loop_body, loop_node, trips_and_true
from support.small_models import unnamed_reshape
from test_runtime import direct_load, real_models, relative

import importer
from service.checks.outcome import DimensionBindingError, verdict
from service.checks.stages.runtime import runtime_stage
from service.checks.stages.smoke import (
    NO_SESSION,
    SMOKE_OUTPUT_SHAPE,
    SMOKE_OUTPUT_TYPE,
    SMOKE_RUN_FAILED,
    smoke_stage,
)

ort: Any = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (the `runtime` extra)")

RTOL, ATOL = 1e-3, 1e-7  # onnx's backend runner (onnx/backend/test/runner)
CASE_GROUPS = ("node", "simple", "pytorch-converted", "pytorch-operator")

# Cases (by folder prefix) where onnxruntime itself does not give the
# backend's expected outputs: prefix -> why. The test requires onnxruntime's
# own run of the file (`InferenceSession(path).run`) to give exactly what the
# stage gave (or fail alike): the stage adds no difference of its own.
ALLOWED_MISMATCHES = {
    "node/test_attention_4d_causal_fp16": "onnxruntime's float16 Attention differs beyond rtol=1e-3",
    "node/test_attention_4d_with_past_and_present_qk_matmul_bias_": "onnxruntime's qk_matmul output with bias and mask differs",
    "node/test_attention_4d_diff_heads_mask4d_padded_kv": "onnxruntime refuses the mask's total sequence length",
    "node/test_convinteger_with_padding": "onnxruntime's ConvInteger takes no per-channel zero point",
    "node/test_dft": "onnxruntime's DFT differs from the reference beyond the tolerance",
    "node/test_stft": "onnxruntime's STFT differs from the reference beyond the tolerance",
    "node/test_maxunpool_export_with_output_shape": "onnxruntime places the unpooled values elsewhere",
    "node/test_reduce_max_empty_set_bool": "onnxruntime refuses ReduceMax of an empty bool set",
    "node/test_resize_downsample_scales_": "onnxruntime's align_corners downsampling differs (cubic, linear)",
    "node/test_training_dropout": "random masks: onnxruntime's generator is not numpy's",
}

# Cases whose expected outputs depend on the ml_dtypes the backend's data was
# generated with (tools/gen_backend_data.py runs onnx's reference, which casts
# with it): since ml_dtypes 0.7 a float outside the 4-bit and 2-bit integer
# ranges casts to 0, where ml_dtypes 0.6 and onnxruntime wrap it around. They
# may match or not (data generated before and after an upgrade), so they are
# not listed as stale when they match.
MAY_DIFFER = {
    f"node/test_{op}_{source}_to_{target}": "ml_dtypes 0.7's reference casts an out-of-range float to 0; onnxruntime wraps it"
    for op in ("cast", "castlike")
    for source in ("FLOAT", "FLOAT16")
    for target in ("INT2", "INT4", "UINT2", "UINT4")
}


def _may_differ(case: str) -> bool:
    return any(case.startswith(prefix) for prefix in MAY_DIFFER)


def _allowed(case: str) -> str | None:
    listed = {**ALLOWED_MISMATCHES, **MAY_DIFFER}
    return next((why for prefix, why in listed.items() if case.startswith(prefix)), None)


# The bit patterns onnxruntime gives for types numpy lacks, read as ml_dtypes.
_ML_DTYPES = {
    "tensor(bfloat16)": ml_dtypes.bfloat16,
    "tensor(float8e4m3fn)": ml_dtypes.float8_e4m3fn,
    "tensor(float8e4m3fnuz)": ml_dtypes.float8_e4m3fnuz,
    "tensor(float8e5m2)": ml_dtypes.float8_e5m2,
    "tensor(float8e5m2fnuz)": ml_dtypes.float8_e5m2fnuz,
    "tensor(float8e8m0)": ml_dtypes.float8_e8m0fnu,
}


def _cases(manifest: dict[str, Any]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Case folder -> data set folder -> its .pb files (tensor cases only; a case with any other kind is left out)."""
    cases: dict[str, dict[str, list[dict[str, Any]]]] = {}
    others = {item["model"] for item in manifest["non_tensor_files"]}
    for item in manifest["tensor_files"]:
        if item["model"].split("/")[0] not in CASE_GROUPS or item["model"] in others:
            continue
        case = item["model"].rsplit("/", 1)[0]
        data_set = item["path"].rsplit("/", 1)[0]
        cases.setdefault(case, {}).setdefault(data_set, []).append(item)
    return cases


# Packed types: bits per element, whether signed, the ml_dtypes type of to_array.
_PACKED = {
    "tensor(int4)": (4, True, ml_dtypes.int4),
    "tensor(uint4)": (4, False, ml_dtypes.uint4),
    "tensor(int2)": (2, True, ml_dtypes.int2),
    "tensor(uint2)": (2, False, ml_dtypes.uint2),
    "tensor(float4e2m1)": (4, False, ml_dtypes.float4_e2m1fn),
}


def _as_numpy(value: Any) -> Any:
    """An output as the sink holds it: a numpy array, or an OrtValue of a
    type numpy lacks, read through its pointer into the ml_dtypes type that
    onnx.numpy_helper.to_array gives (packed types unpacked, one element per item)."""
    if isinstance(value, np.ndarray):
        return value
    shape = tuple(value.shape())
    count = int(np.prod(shape))
    if value.data_type() in _PACKED:
        bits, signed, target = _PACKED[value.data_type()]
        size = (count * bits + 7) // 8
        packed = np.frombuffer(bytes((ctypes.c_uint8 * size).from_address(value.data_ptr())) if size else b"", np.uint8)
        stream = np.unpackbits(packed, bitorder="little")[: count * bits].reshape(count, bits)
        codes = (stream * (1 << np.arange(bits))).sum(axis=1).astype(np.int16)
        if target == ml_dtypes.float4_e2m1fn:
            return codes.astype(np.uint8).view(target).reshape(shape)
        if signed:
            codes[codes >= 1 << (bits - 1)] -= 1 << bits
        return codes.astype(np.int8).astype(target).reshape(shape)
    dtype = np.dtype(_ML_DTYPES[value.data_type()])
    raw = (ctypes.c_uint8 * (count * dtype.itemsize)).from_address(value.data_ptr()) if count else b""
    return np.frombuffer(bytes(raw), dtype=dtype).reshape(shape)


def _mismatch(actual: np.ndarray[Any, Any], expected: np.ndarray[Any, Any]) -> str | None:
    """The backend runner's comparison: the same dtype, strings equal, numbers close."""
    try:
        np.testing.assert_equal(actual.dtype, expected.dtype)
        if expected.dtype == object:
            np.testing.assert_array_equal(actual, expected)
        elif expected.dtype in {np.dtype(kind) for kind in [*_ML_DTYPES.values(), *(entry[2] for entry in _PACKED.values())]}:
            np.testing.assert_allclose(actual.astype(np.float32), expected.astype(np.float32), rtol=RTOL, atol=ATOL)
        else:
            np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)
    except AssertionError as error:
        return str(error).strip().splitlines()[0][:300]
    return None


def _direct_run(path: Path, inputs: dict[str, np.ndarray[Any, Any]]) -> list[Any] | str:
    """onnxruntime's own run of the file: its outputs, or its error."""
    try:
        outputs: list[Any] = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, inputs)
    except Exception as error:
        return str(error)
    return outputs


@pytest.mark.slow
def test_given_the_backends_inputs_the_run_gives_its_expected_outputs(
    backend_manifest: dict[str, Any], backend_dir: Path, report: list[str]
) -> None:
    started = time.monotonic()
    counts: Counter[str] = Counter()
    mismatches: dict[str, str] = {}
    not_onnxruntimes: dict[str, str] = {}  # allowed mismatches onnxruntime's own run does not show
    cases = _cases(backend_manifest)
    ort.set_default_logger_severity(4)
    for case, data_sets in sorted(cases.items()):
        model = importer.load_model(backend_dir / case / "model.onnx")
        with model:
            _, session = runtime_stage(model)
            if session is None:
                counts["cases onnxruntime does not load (the runtime sweep compares those)"] += 1
                continue
            for data_set, items in sorted(data_sets.items()):
                inputs = {
                    item["name"]: numpy_helper.to_array(onnx.load_tensor(str(backend_dir / item["path"])))
                    for item in items
                    if item["role"] == "input"
                }
                expected = [
                    numpy_helper.to_array(onnx.load_tensor(str(backend_dir / item["path"])))
                    for item in sorted(items, key=lambda item: int(item["index"]))
                    if item["role"] == "output"
                ]
                sink: list[object] = []
                outcome = smoke_stage(session, model, {}, inputs=inputs, outputs_sink=sink)
                counts[f"data sets {outcome.status}"] += 1
                problem = None
                if outcome.status != "pass":
                    problem = f"{outcome.status} {outcome.reason} {[f.message for f in outcome.findings]}"[:600]
                else:
                    assert len(sink) >= len(expected), case
                    problem = next(
                        (f"output {i}: {why}" for i, want in enumerate(expected) if (why := _mismatch(_as_numpy(sink[i]), want))), None
                    )
                if problem is None:
                    continue
                mismatches[case] = f"{data_set}: {problem}"
                if _allowed(case) is not None:
                    direct = _direct_run(backend_dir / case / "model.onnx", inputs)
                    if _may_differ(case) and isinstance(direct, str) and ("Numpy type" in direct or "Numpy_type" in direct):
                        continue  # onnxruntime's Python API neither takes nor returns 4-bit or 2-bit tensors: nothing to compare with
                    if isinstance(direct, str) or outcome.status != "pass":
                        alike = isinstance(direct, str) and outcome.status == "fail"
                    else:
                        alike = all(np.array_equal(_as_numpy(sink[i]), direct[i], equal_nan=True) for i in range(len(expected)))
                    if not alike:
                        not_onnxruntimes[case] = f"the stage: {problem}; onnxruntime's own run: {str(direct)[:300]}"
    seconds = time.monotonic() - started
    summary = f"{len(cases)} tensor cases, {dict(counts)}, {len(mismatches)} allowed mismatches"
    report.append(f"smoke on the backend's inputs: {summary}, {seconds:.1f} s")
    unexpected = {case: why for case, why in mismatches.items() if _allowed(case) is None}
    stale = sorted(prefix for prefix in ALLOWED_MISMATCHES if not any(case.startswith(prefix) for case in mismatches))
    assert counts["data sets pass"] > 1700
    assert not unexpected, f"{len(unexpected)} mismatches: {json.dumps(unexpected, indent=1)[:8000]}"
    assert not not_onnxruntimes, f"allowed mismatches that are not onnxruntime's own: {json.dumps(not_onnxruntimes, indent=1)[:8000]}"
    assert not stale, f"listed mismatches that are gone: {stale}"


@pytest.mark.slow
def test_every_real_model_passes_on_synthetic_inputs(report: list[str]) -> None:
    paths = real_models()
    assert len(paths) >= 12
    started = time.monotonic()
    refused = []
    for path in paths:
        with importer.load_model(path) as model:
            loaded, session = runtime_stage(model)
            if loaded.status == "fail" and direct_load(path) is not None:  # onnxruntime refuses it too (the runtime sweep)
                refused.append(relative(path))
                continue
            assert loaded.status == "pass", (relative(path), loaded)
            result = smoke_stage(session, model, {})
            assert result.status == "pass", (relative(path), result)
    assert len(refused) <= 1, refused  # cnn-dynamo-bfloat16: bfloat16 Conv, which onnxruntime has no kernel for
    seconds = time.monotonic() - started
    report.append(f"smoke on synthetic inputs: {len(paths) - len(refused)} real models pass ({refused} not loadable), {seconds:.1f} s")


# --- synthetic inputs


def _info(name: str, elem: int = TensorProto.FLOAT, shape: list[int | str] | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [4] if shape is None else shape)


def _identities(types: Mapping[str, int], shape: list[int | str], opset: int = 21, declared: list[int | str] | None = None) -> bytes:
    """A model with one Identity per input `NAME` of each type, its output `NAME_out`."""
    graph = helper.make_graph(
        [helper.make_node("Identity", [name], [f"{name}_out"]) for name in types],
        "g",
        [_info(name, elem, shape) for name, elem in types.items()],
        [_info(f"{name}_out", elem, shape if declared is None else declared) for name, elem in types.items()],
    )
    data: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()
    return data


def _smoke(data: bytes, dims: dict[str, int] | None = None, **kwargs: Any) -> tuple[Any, list[object]]:
    model = importer.load_model_bytes(data)
    loaded, session = runtime_stage(model)
    assert loaded.status == "pass", loaded
    sink: list[object] = []
    return smoke_stage(session, model, dims or {}, outputs_sink=sink, **kwargs), sink


NUMERIC = {
    "f32": TensorProto.FLOAT, "f64": TensorProto.DOUBLE, "f16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16,
    "f8": TensorProto.FLOAT8E4M3FN, "i8": TensorProto.INT8, "i16": TensorProto.INT16, "i32": TensorProto.INT32,
    "i64": TensorProto.INT64, "u8": TensorProto.UINT8, "u16": TensorProto.UINT16, "u32": TensorProto.UINT32,
    "u64": TensorProto.UINT64, "b": TensorProto.BOOL,
}  # fmt: skip


def test_synthetic_inputs_of_every_numeric_type_run_and_their_outputs_are_as_declared() -> None:
    result, sink = _smoke(_identities(NUMERIC, ["N", 3]))
    assert result.status == "pass" and not result.findings, result
    arrays = [_as_numpy(value) for value in sink]
    assert [array.shape for array in arrays] == [(1, 3)] * len(NUMERIC)  # N takes 1
    by_name = dict(zip(NUMERIC, arrays, strict=True))
    assert by_name["f32"].dtype == np.float32 and (by_name["f32"] == 1).all()  # floats are 1
    assert by_name["bf16"].dtype == ml_dtypes.bfloat16 and (by_name["bf16"].astype(np.float32) == 1).all()
    assert by_name["i64"].dtype == np.int64 and (by_name["i64"] == 0).all()  # integers 0
    assert by_name["b"].dtype == np.bool_ and not by_name["b"].any()


def test_string_inputs_run_alongside_native_types() -> None:
    result, sink = _smoke(_identities({"s": TensorProto.STRING, "i": TensorProto.INT64}, [2]))
    assert result.status == "pass", result
    strings = sink[0]
    assert isinstance(strings, np.ndarray) and strings.tolist() == ["", ""]


def test_symbolic_dimensions_take_their_binding_and_must_agree_across_outputs() -> None:
    result, sink = _smoke(_identities({"x": TensorProto.FLOAT}, ["batch", 3]), dims={"batch": 5})
    assert result.status == "pass" and _as_numpy(sink[0]).shape == (5, 3)
    # x is [N, 3] and z [M, 3] with M bound to 2; the output of Identity(x) declares [M, 3]: it is [1, 3].
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["z"], ["w"])],
        "g",
        [_info("x", shape=["N", 3]), _info("z", shape=["M", 3])],
        [_info("y", shape=["M", 3]), _info("w", shape=["M", 3])],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    result, _ = _smoke(data, dims={"M": 2})
    [finding] = result.findings
    model = importer.load_model_bytes(data)
    assert (result.status, finding.code, finding.field_path) == ("fail", SMOKE_OUTPUT_SHAPE, "ModelProto.graph.output[0]")
    assert finding.offset == model.graph.proto.output[0].offset and finding.offset > 0
    assert "'M'" in finding.message and verdict([result]) == "fail"


def test_an_output_shape_unlike_its_declaration_is_an_error_at_the_output() -> None:
    data = _identities({"x": TensorProto.FLOAT, "z": TensorProto.FLOAT}, [2, 3], declared=[2, 5])
    result, _ = _smoke(data)
    assert result.status == "fail"
    model = importer.load_model_bytes(data)
    places = [(f.code, f.field_path, f.offset) for f in result.findings]
    assert places == [(SMOKE_OUTPUT_SHAPE, f"ModelProto.graph.output[{i}]", model.graph.proto.output[i].offset) for i in (0, 1)]


def test_an_output_type_unlike_its_declaration_is_an_error_at_the_output() -> None:
    # onnxruntime refuses such a model at load; the stage compares what any
    # session gives: this one (float) against a model declaring int64.
    runs = importer.load_model_bytes(_identities({"x": TensorProto.FLOAT}, [4]))
    _, session = runtime_stage(runs)
    declares = importer.load_model_bytes(_identities({"x": TensorProto.INT64}, [4]))
    result = smoke_stage(session, declares, {}, inputs={"x": np.zeros(4, np.float32)})
    [finding] = result.findings
    place = (finding.code, finding.field_path, finding.offset)
    assert place == (SMOKE_OUTPUT_TYPE, "ModelProto.graph.output[0]", declares.graph.proto.output[0].offset)
    assert "INT64" in finding.message and "FLOAT" in finding.message


def test_a_failing_run_is_an_error_at_the_node_it_names() -> None:
    # The synthetic shape input is [0, 0]: Reshape cannot copy dimension 1 of a 1-d tensor.
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="first"), helper.make_node("Reshape", ["r", "shape"], ["y"], name="reshape_it")],
        "g",
        [_info("x", shape=[6]), _info("shape", TensorProto.INT64, [2])],
        [_info("y", shape=[None, None])],  # type: ignore[list-item]
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    result, _ = _smoke(data)
    [finding] = result.findings
    model = importer.load_model_bytes(data)
    place = (finding.stage, finding.code, finding.node_name, finding.field_path)
    assert place == ("smoke", SMOKE_RUN_FAILED, "reshape_it", "ModelProto.graph.node[1]")
    assert finding.offset == model.graph.proto.node[1].offset and "synthetic inputs" in finding.message


def test_what_the_stage_cannot_make_or_run_is_skipped_or_incomplete_with_the_reason() -> None:
    model = importer.load_model_bytes(_identities({"x": TensorProto.FLOAT}, [4]))
    assert (smoke_stage(None, model, {}).status, smoke_stage(None, model, {}).reason) == ("skipped", NO_SESSION)
    graph = helper.make_graph(
        [helper.make_node("SequenceLength", ["seq"], ["n"])],
        "g",
        [helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("n", TensorProto.INT64, [])],
    )
    result, _ = _smoke(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    assert result.status == "skipped" and "'seq' is a sequence" in result.reason
    assert verdict([result]) == "incomplete"  # a smoke run asked for and not made is no pass (outcome.py)

    class OutOfMemory:
        def run_with_ort_values(self, *args: object) -> None:
            raise MemoryError

    result = smoke_stage(OutOfMemory(), model, {})
    assert result.status == "incomplete" and "out of memory" in result.reason
    assert verdict([result]) == "incomplete"


# --- sequences and maps, judged by their declared types


def _classifier() -> bytes:
    """A scikit-learn LogisticRegression fitted on four rows, converted by
    skl2onnx with its defaults: `output_label` (int64 [N]) and
    `output_probability`, ZipMap's sequence(map(int64, tensor(float)))."""
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression

    rows = np.array([[0, 0], [1, 1], [0, 1], [1, 0]], dtype=np.float32)
    fitted = LogisticRegression().fit(rows, np.array([0, 1, 0, 1]))
    data: bytes = to_onnx(fitted, rows[:1], target_opset=17).SerializeToString()
    return data


def test_a_scikit_learn_classifier_with_its_zipmap_output_passes() -> None:
    data = _classifier()
    declared = onnx.load_from_string(data).graph.output[1].type
    assert declared.sequence_type.elem_type.map_type.key_type == TensorProto.INT64  # skl2onnx's default ZipMap output
    result, sink = _smoke(data)
    assert (result.status, result.findings) == ("pass", []), result
    labels, probabilities = sink
    assert isinstance(labels, np.ndarray) and labels.dtype == np.int64 and labels.shape == (1,)  # N took 1: one row
    assert isinstance(probabilities, list) and len(probabilities) == 1  # ... one map
    [row] = probabilities
    assert set(row) == {0, 1} and abs(sum(row.values()) - 1) < 1e-5


def test_a_map_element_unlike_its_declaration_is_an_error_at_the_output() -> None:
    # The session runs the classifier as converted (int64 keys); the model the
    # stage compares with declares string keys, as a label-encoded ZipMap would.
    runs = importer.load_model_bytes(_classifier())
    _, session = runtime_stage(runs)
    proto = onnx.load_from_string(_classifier())
    proto.graph.output[1].type.sequence_type.elem_type.map_type.key_type = TensorProto.STRING
    declares = importer.load_model_bytes(proto.SerializeToString())
    result = smoke_stage(session, declares, {})
    [finding] = result.findings
    place = (finding.code, finding.field_path, finding.offset)
    assert place == (SMOKE_OUTPUT_TYPE, "ModelProto.graph.output[1]", declares.graph.proto.output[1].offset)
    assert "element [0] has the key 0 (an int), declared STRING keys" in finding.message and result.status == "fail"


def _sequence_model(declared: int) -> bytes:
    """SequenceConstruct of a float input; its output declared a sequence of `declared` tensors."""
    graph = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["x"], ["seq"])],
        "g",
        [_info("x", shape=[2])],
        [helper.make_tensor_sequence_value_info("seq", declared, [2])],
    )
    data: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    return data


def test_a_sequence_from_an_ortvalue_is_judged_by_its_type_name() -> None:
    # No output declares a map: the run goes through run_with_ort_values, whose
    # sequence gives no elements, only its type's name (seq(tensor(float))).
    result, sink = _smoke(_sequence_model(TensorProto.FLOAT))
    assert result.status == "pass" and str(sink[0].data_type()) == "seq(tensor(float))"  # type: ignore[attr-defined]
    _, session = runtime_stage(importer.load_model_bytes(_sequence_model(TensorProto.FLOAT)))
    declares = importer.load_model_bytes(_sequence_model(TensorProto.INT64))
    [finding] = smoke_stage(session, declares, {}).findings
    assert (finding.code, finding.field_path) == (SMOKE_OUTPUT_TYPE, "ModelProto.graph.output[0]")
    assert "declared seq(tensor(int64)), the run gave seq(tensor(float))" in finding.message


# --- dimensions without a name


def test_dimensions_without_names_are_bound_by_input_and_axis() -> None:
    result, sink = _smoke(unnamed_reshape(), dims={"x[0]": 2, "x[1]": 3})
    assert (result.status, result.findings) == ("pass", []), result
    assert _as_numpy(sink[0]).shape == (2, 3)
    # Unbound, both take 1, and one element cannot be cut in two halves: the
    # finding says which dimensions took 1 and the binding of each.
    result, _ = _smoke(unnamed_reshape())
    [finding] = result.findings
    assert (result.status, finding.code, finding.node_name) == ("fail", SMOKE_RUN_FAILED, "halves")
    assert "failed (unbound, these dimensions took 1: axis 0 of input 'x' (--dim x[0]:VALUE, ?dim=x%5B0%5D:VALUE)" in finding.message
    assert "axis 1 of input 'x' (--dim x[1]:VALUE, ?dim=x%5B1%5D:VALUE)" in finding.message
    # Bound otherwise (2 x 1 elements), the run passes; bound to 1 by the request, no hint is given.
    assert _smoke(unnamed_reshape(), dims={"x[0]": 2})[0].status == "pass"
    [bound_to_one] = _smoke(unnamed_reshape(), dims={"x[0]": 1, "x[1]": 1})[0].findings
    assert bound_to_one.code == SMOKE_RUN_FAILED and "took 1" not in bound_to_one.message


def test_an_output_shape_at_a_default_dimension_names_the_binding() -> None:
    # y declares [2, 3] and is Identity(x) of x [N, 3]: N took 1, and --dim N:2 would give the declared shape.
    data = _identities({"x": TensorProto.FLOAT}, ["N", 3], declared=[2, 3])
    [finding] = _smoke(data)[0].findings
    assert finding.code == SMOKE_OUTPUT_SHAPE and "these dimensions took 1: 'N' (--dim N:VALUE, ?dim=N:VALUE)" in finding.message
    assert _smoke(data, dims={"N": 2})[0].status == "pass"


def test_a_binding_the_model_has_no_place_for_is_no_stage_result() -> None:
    model = importer.load_model_bytes(unnamed_reshape())
    _, session = runtime_stage(model)
    with pytest.raises(DimensionBindingError, match="unknown dimension binding nosuch:5"):
        smoke_stage(session, model, {"nosuch": 5})


# --- the run's CPU budget


def _counted_loop(trips: int, api: str) -> bytes:
    """`constant_loop(trips)`; for the numpy API, with a string passed through beside it (onnxruntime makes no
    OrtValue of strings: the stage runs such a model with `session.run`)."""
    if api == "ortvalues":
        model = constant_loop(trips)
    else:
        strings = [helper.make_tensor_value_info(name, TensorProto.STRING, [1]) for name in ("s", "s_out")]
        nodes = [loop_node(loop_body()), helper.make_node("Identity", ["s"], ["s_out"])]
        model = graph_of_loop(nodes, trips_and_true(trips), extra_inputs=strings[:1], extra_outputs=strings[1:])
    data: bytes = model.SerializeToString()
    return data


@pytest.mark.parametrize("api", ["ortvalues", "numpy"])
def test_a_loop_of_10_15_trips_is_stopped_once_it_has_used_its_cpu_budget(api: str) -> None:
    started = time.monotonic()
    result, sink = _smoke(_counted_loop(10**15, api), cpu_seconds=0.5)
    assert time.monotonic() - started < 30  # it returned: without the budget it runs until the worker's CPU limit kills it
    assert (result.status, result.findings, sink) == ("incomplete", [], [])
    assert result.reason == "the smoke run used its 0.5 CPU-seconds (--smoke-cpu-seconds) without finishing"
    assert verdict([result]) == "incomplete"  # a limit: never a pass


@pytest.mark.parametrize("api", ["ortvalues", "numpy"])
def test_a_run_that_finishes_within_its_budget_is_unaffected(api: str) -> None:
    result, sink = _smoke(_counted_loop(5, api), cpu_seconds=0.5)
    assert (result.status, result.findings) == ("pass", []), result
    assert float(_as_numpy(sink[0])) == 6.0  # the synthetic v0 (1.0), plus one on each of the 5 trips
