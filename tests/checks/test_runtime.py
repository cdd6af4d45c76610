"""The `runtime` stage (service/checks/stages/runtime.py), in process.

- Its verdict equals onnxruntime's own on every model to hand: the ONNX
  backend test models (node, simple, pytorch-converted, pytorch-operator and
  the real models of light/; real/ holds only pointers to those), the
  repository's samples (testdata/samples) and the torch exports cached in
  .cache/torch-exports: the stage passes exactly where
  `onnxruntime.InferenceSession(path)` loads the file, and a refusal has the
  code of onnxruntime's status. Differences are listed in ALLOWED_DIFFERENCES.
- A load failure is placed at the node onnxruntime names (by name, or by a
  unique operator type), in the main graph or a subgraph, at the node's field
  path and byte offset; otherwise at the model.
- External data comes from the importer's memory: the stage loads models
  whose external files were deleted after the import (main-graph
  initializers, a subgraph's initializer, a Constant's value), and the
  session computes what onnxruntime computes from the files.
- Given the locations the check worker bound (every one the model names),
  the session is made from the model's path instead (`weights`: "mapped");
  the hand-over says "handed over". With the model file bound and its
  weights inline, the large ones are mapped where they lie in the file.
- The session is confined as the worker needs it (one thread each way, no
  spinning, sequential, CPU only); without onnxruntime, on a closed model or
  on memory exhaustion the stage is `incomplete` (fail closed).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import set_external_data
from support.paths import CACHE, REPO

import importer
from service.checks.outcome import verdict
from service.checks.stages import runtime
from service.checks.stages.runtime import (
    MISSING_ONNXRUNTIME,
    RUNTIME_INVALID_GRAPH,
    RUNTIME_LOAD_FAILED,
    RUNTIME_OP_NOT_IMPLEMENTED,
    runtime_stage,
)
from service.checks.stages.smoke import smoke_stage
from service.checks.stages.weights_aside import weights_set_aside

ort: Any = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (the `runtime` extra)")

BACKEND_GROUPS = ("node", "simple", "pytorch-converted", "pytorch-operator", "light")
SAMPLES = REPO / "testdata" / "samples"
TORCH_EXPORTS = CACHE / "torch-exports"

# Models whose `runtime` verdict differs from onnxruntime's own load of the
# file: path relative to the repository -> why. Empty on onnxruntime 1.32 /
# onnx 1.23.2. (The StringNormalizer models fail to load in both, for want of
# the en_US.UTF-8 locale on this machine: the same verdict, so not listed.)
ALLOWED_DIFFERENCES: dict[str, str] = {}

# onnxruntime's exception class -> the code the stage gives.
CODE_OF_STATUS = {"NotImplemented": RUNTIME_OP_NOT_IMPLEMENTED, "InvalidGraph": RUNTIME_INVALID_GRAPH, "Fail": None}


def every_model(manifest: dict[str, Any], backend_dir: Path) -> list[Path]:
    """The models of the sweeps: the backend's groups, the samples, the cached torch exports."""
    paths = [backend_dir / item for item in manifest["models"] if item.split("/")[0] in BACKEND_GROUPS]
    return paths + real_models()


def real_models() -> list[Path]:
    """The real models: the backend's light/ ones, the samples, the torch exports cached (status ok)."""
    from support.paths import BACKEND_DATA

    paths = sorted((BACKEND_DATA / "light").glob("*.onnx")) + sorted(SAMPLES.rglob("*.onnx"))
    for folder in sorted(TORCH_EXPORTS.glob("*")):
        record = folder / "export.json"
        if record.exists() and json.loads(record.read_text()).get("status") == "ok" and (folder / "model.onnx").exists():
            paths.append(folder / "model.onnx")
    return paths


def relative(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def direct_load(path: Path) -> Exception | None:
    """onnxruntime's own verdict: the exception of `InferenceSession(path)`, or None."""
    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as error:
        return error
    return None


@pytest.mark.slow
def test_the_runtime_verdict_is_onnxruntimes_own_on_every_model(
    backend_manifest: dict[str, Any], backend_dir: Path, report: list[str]
) -> None:
    paths = every_model(backend_manifest, backend_dir)
    assert len(paths) > 2000 and any("light/" in relative(path) for path in paths)
    ort.set_default_logger_severity(4)
    started = time.monotonic()
    differences: dict[str, str] = {}
    statuses: Counter[str] = Counter()
    for path in paths:
        name = relative(path)
        error = direct_load(path)
        try:
            model = importer.load_model(path)
        except importer.ModelImportError as refusal:
            differences[name] = f"the importer refuses it ({refusal}); onnxruntime {'refuses' if error else 'loads'} it"
            continue
        with model:
            result, session = runtime_stage(model)
        statuses[result.status] += 1
        if result.status not in ("pass", "fail"):
            differences[name] = f"{result.status}: {result.reason}"
        elif (result.status == "pass") != (error is None):
            differences[name] = f"stage {result.status}, onnxruntime: {error or 'loads it'}"
        elif error is not None:
            assert session is None
            assert result.errors == 1 and len(result.findings) == 1, name
            code = CODE_OF_STATUS.get(type(error).__name__)
            if code is not None and "is not a registered function/op" not in str(error):
                assert result.findings[0].code == code, (name, result.findings[0], error)
        else:
            assert session is not None and not result.findings
    seconds = time.monotonic() - started
    report.append(f"runtime verdict sweep: {len(paths)} models, {dict(statuses)}, {seconds:.1f} s (with onnxruntime's own loads)")
    unexpected = {name: why for name, why in differences.items() if name not in ALLOWED_DIFFERENCES}
    stale = sorted(set(ALLOWED_DIFFERENCES) - set(differences))
    assert not unexpected, f"{len(unexpected)} differences: {json.dumps(unexpected, indent=1)[:6000]}"
    assert not stale, f"listed differences that are gone: {stale}"


# --- places


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto], **kwargs: Any) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=kwargs.pop("initializer", None))
    opsets = [helper.make_opsetid("", 17), *kwargs.pop("opsets", [])]
    data: bytes = helper.make_model(graph, opset_imports=opsets, **kwargs).SerializeToString()
    return data


def _info(name: str, elem: int = TensorProto.FLOAT, shape: list[int | str] | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [4] if shape is None else shape)


def _assert_at_node(data: bytes, field_path: str, index_path: tuple[int, ...], code: str) -> None:
    model = importer.load_model_bytes(data)
    result, session = runtime_stage(model)
    assert result.status == "fail" and session is None
    [finding] = result.findings
    assert (finding.stage, finding.severity, finding.code, finding.field_path) == ("runtime", "error", code, field_path)
    node = model.graph.proto.node[index_path[0]]
    for index in index_path[1:]:  # into the first graph attribute of that node
        graph = next(attribute.value for attribute in node.attribute if isinstance(attribute.value, importer.messages.Graph))
        node = graph.node[index]
    assert (finding.node_name, finding.op_type, finding.offset) == (node.name, node.op_type, node.offset)
    assert data[finding.offset] == 0x0A  # the key of a `node` field (field 1, length-delimited)
    assert verdict([result]) == "fail"


def test_a_node_of_a_type_onnxruntime_refuses_is_placed_by_its_name() -> None:
    data = _model(
        [
            helper.make_node("Relu", ["x"], ["a"], name="first"),
            helper.make_node("Conv", ["b", "w"], ["y"], name="bad_conv"),
            helper.make_node("Cast", ["a"], ["b"], name="to_bf16", to=TensorProto.BFLOAT16),
        ],
        [_info("x", shape=[1, 1, 4, 4]), _info("w", TensorProto.BFLOAT16, [1, 1, 1, 1])],
        [_info("y", TensorProto.BFLOAT16, [1, 1, 4, 4])],
    )
    _assert_at_node(data, "ModelProto.graph.node[1]", (1,), RUNTIME_INVALID_GRAPH)


def test_an_unnamed_node_of_a_unique_unknown_op_is_placed_by_its_type() -> None:
    data = _model(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Frobnicate", ["a"], ["y"], domain="com.example")],
        [_info("x")],
        [_info("y")],
        opsets=[helper.make_opsetid("com.example", 1)],
    )
    _assert_at_node(data, "ModelProto.graph.node[1]", (1,), RUNTIME_OP_NOT_IMPLEMENTED)


def test_a_node_in_a_subgraph_is_placed_in_the_subgraph() -> None:
    branch = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["t"], domain="com.example")], "then", [], [_info("t")])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [_info("e")])
    data = _model(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)],
        [_info("c", TensorProto.BOOL, []), _info("x")],
        [_info("y")],
        opsets=[helper.make_opsetid("com.example", 1)],
    )
    model = importer.load_model_bytes(data)
    then_index = next(i for i, attribute in enumerate(model.graph.proto.node[0].attribute) if attribute.name == "then_branch")
    path = f"ModelProto.graph.node[0].attribute[{then_index}].g.node[0]"
    result, _ = runtime_stage(model)
    [finding] = result.findings
    then_graph = model.graph.proto.node[0].attribute[then_index].value
    assert isinstance(then_graph, importer.messages.Graph)
    assert (finding.code, finding.field_path, finding.offset) == (RUNTIME_OP_NOT_IMPLEMENTED, path, then_graph.node[0].offset)
    assert finding.op_type == "Frobnicate" and finding.domain == "com.example"


def test_a_failure_that_names_no_node_it_can_tell_is_placed_at_the_model() -> None:
    # Two unnamed nodes of the op onnxruntime lacks: the message cannot tell which.
    data = _model(
        [
            helper.make_node("Frobnicate", ["x"], ["a"], domain="com.example"),
            helper.make_node("Frobnicate", ["a"], ["y"], domain="com.example"),
        ],
        [_info("x")],
        [_info("y")],
        opsets=[helper.make_opsetid("com.example", 1)],
    )
    result, session = runtime_stage(importer.load_model_bytes(data))
    [finding] = result.findings
    assert session is None and result.status == "fail"
    assert (finding.field_path, finding.offset, finding.node_name) == ("ModelProto", 0, None)
    assert "Frobnicate" in finding.message


# --- external data, from the importer's memory


def test_external_data_comes_from_the_importers_memory_not_the_files(tmp_path: Path) -> None:
    folder = tmp_path / "external"
    shutil.copytree(SAMPLES / "external", folder)
    x = np.linspace(-1, 1, 64 * 3, dtype=np.float32).reshape(3, 64)
    [expected] = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    model = importer.load_model(folder / "model.onnx")
    shutil.rmtree(folder)  # the mappings stay; onnxruntime could open no file now
    with model:
        result, session = runtime_stage(model)
        assert (result.status, result.weights) == ("pass", "handed over"), result
        live: Any = session
        [actual] = live.run(None, {"X": x})
    np.testing.assert_array_equal(actual, expected)


def test_with_every_external_file_mapped_the_session_is_made_from_the_path(tmp_path: Path) -> None:
    """Where the check worker has bound every external file (its locations given), onnxruntime makes the session
    from the model's path and maps the files itself, as a user's `InferenceSession(path)` does; one file left out
    and the weights are handed over as before. Both compute what onnxruntime computes; the smoke run passes."""
    folder = tmp_path / "external"
    shutil.copytree(SAMPLES / "external", folder)
    x = np.linspace(-1, 1, 64 * 3, dtype=np.float32).reshape(3, 64)
    [expected] = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    with importer.load_model(folder / "model.onnx") as model:
        assert runtime.external_locations(model) == {"weights.bin", "more/bias.bin"}
        for mapped, weights in (({"weights.bin", "more/bias.bin", "unused.bin"}, "mapped"), ({"weights.bin"}, "handed over")):
            result, session = runtime_stage(model, frozenset(mapped))
            assert (result.status, result.weights) == ("pass", weights), (mapped, result)
            live: Any = session
            [actual] = live.run(None, {"X": x})
            np.testing.assert_array_equal(actual, expected)
            assert smoke_stage(session, model, {}).status == "pass"


def _inline_model(folder: Path) -> Path:
    """A model of inline weights: one over the 64 KiB of ASIDE_BYTES ("W"), one under it, one of int64."""
    rng = np.random.default_rng(3)
    large = numpy_helper.from_array(rng.normal(0, 1, (64, 512)).astype(np.float32), "W")  # 128 KiB
    small = numpy_helper.from_array(rng.normal(0, 1, 512).astype(np.float32), "B")
    shape = numpy_helper.from_array(np.array([2, 256], np.int64), "shape")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W"], ["m"], name="mm"),
            helper.make_node("Add", ["m", "B"], ["a"], name="bias"),
            helper.make_node("Reshape", ["a", "shape"], ["Y"], name="fold"),
        ],
        "inline",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 256])],
        [large, small, shape],
    )
    path = folder / "inline.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_large_inline_weights_are_handed_over_from_memory_not_copied(tmp_path: Path) -> None:
    """onnxruntime gets a copy of the model's bytes without the large weight's values, which it takes from the
    importer's mapping; the session computes what onnxruntime's own load of the file computes."""
    path = _inline_model(tmp_path)
    x = np.random.default_rng(4).normal(0, 1, (1, 64)).astype(np.float32)
    [expected] = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    with importer.load_model(path) as model:
        aside = weights_set_aside(model, lambda tensor: True)
        assert aside is not None
        data, moved = aside
        assert [tensor.name for tensor in moved] == ["W"]
        given = onnx.ModelProto.FromString(data)
        original = onnx.load(str(path))
        assert given.graph.node == original.graph.node and given.graph.input == original.graph.input
        weight, bias, target = given.graph.initializer
        assert (weight.name, list(weight.dims), weight.raw_data, weight.data_location) == ("W", [64, 512], b"", TensorProto.EXTERNAL)
        assert bias == original.graph.initializer[1] and target == original.graph.initializer[2]
        assert len(data) < path.stat().st_size - 64 * 512 * 4 + 64  # the weights left out, a mark of a few bytes in their place
        result, session = runtime_stage(model)
        assert result.status == "pass", result
        live: Any = session
        [actual] = live.run(None, {"X": x})
    np.testing.assert_array_equal(actual, expected)


def test_with_the_model_file_bound_inline_weights_are_mapped_where_they_lie(tmp_path: Path) -> None:
    """Where the check worker has bound the model file (no external data: `mapped` empty), the large inline weight
    is named to onnxruntime as external data in the model file itself, at its raw data's offset and length, and
    onnxruntime maps it there (`weights`: "mapped"); the session computes what onnxruntime's own load of the file
    computes, and the smoke run passes. With a copy of the model's bytes only (the file gone), nothing names it."""
    path = _inline_model(tmp_path)
    x = np.random.default_rng(4).normal(0, 1, (1, 64)).astype(np.float32)
    [expected] = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    original = onnx.load(str(path))
    with importer.load_model(path) as model:
        aside = weights_set_aside(model, lambda tensor: True, in_file=path.name)
        assert aside is not None
        weight = onnx.ModelProto.FromString(aside[0]).graph.initializer[0]
        named = {entry.key: entry.value for entry in weight.external_data}
        assert (weight.name, weight.data_location, named["location"]) == ("W", TensorProto.EXTERNAL, "inline.onnx"), weight
        offset, length = int(named["offset"]), int(named["length"])
        assert path.read_bytes()[offset : offset + length] == original.graph.initializer[0].raw_data
        result, session = runtime_stage(model, frozenset())
        assert (result.status, result.weights) == ("pass", "mapped"), result
        live: Any = session
        [actual] = live.run(None, {"X": x})
        assert smoke_stage(session, model, {}).status == "pass"
    np.testing.assert_array_equal(actual, expected)
    with importer.load_model_bytes(path.read_bytes()) as copied:
        result, _ = runtime_stage(copied)
        assert (result.status, result.weights) == ("pass", ""), result


def test_with_the_model_file_bound_a_failure_is_the_models_and_an_odd_name_is_handed_over(tmp_path: Path) -> None:
    """A model onnxruntime cannot load, its large weight inline and its file bound: the failure is told as the
    hand-over tells it (the operator onnxruntime does not know, at its node), not as a fault of the copy named in the file;
    a file name onnxruntime would not take as a location (a backslash) has its weights handed over."""
    path = _inline_model(tmp_path)
    proto = onnx.load(str(path))
    proto.graph.node[1].op_type = "Frobnicate"
    failing = tmp_path / "failing.onnx"
    onnx.save(proto, str(failing))
    with importer.load_model(failing) as model:
        result, session = runtime_stage(model, frozenset())
        handed_over, _ = runtime_stage(model)
        assert (result.status, session) == ("fail", None), result
        [finding] = result.findings
        assert (finding.node_name, finding.field_path, "Frobnicate" in finding.message) == ("bias", "ModelProto.graph.node[1]", True)
        assert result.findings == handed_over.findings
    odd = tmp_path / "odd\\name.onnx"
    shutil.copy(path, odd)
    with importer.load_model(odd) as model:
        result, session = runtime_stage(model, frozenset())
        assert (result.status, result.weights) == ("pass", ""), result


def _externalize(tensor: TensorProto, folder: Path, name: str) -> None:
    (folder / name).write_bytes(numpy_helper.to_array(tensor).tobytes())
    set_external_data(tensor, name)
    tensor.ClearField("raw_data")
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL


def test_external_data_of_a_subgraph_and_a_constant_comes_from_memory_too(tmp_path: Path) -> None:
    # onnxruntime's checker opens these files itself (add_external_initializers
    # covers the main graph only): the stage writes them into the bytes it gives.
    weights = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    then_graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t"])], "then", [], [_info("t")], initializer=[weights])
    constant = numpy_helper.from_array(np.arange(4, dtype=np.float32) * 10, "c")
    else_graph = helper.make_graph([helper.make_node("Constant", [], ["e"], value=constant)], "else", [], [_info("e")])
    proto = helper.make_model(
        helper.make_graph(
            [helper.make_node("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph)],
            "g",
            [_info("cond", TensorProto.BOOL, []), _info("x")],
            [_info("y")],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    branches = {attribute.name: attribute.g for attribute in proto.graph.node[0].attribute}
    _externalize(branches["then_branch"].initializer[0], tmp_path, "w.bin")
    _externalize(branches["else_branch"].node[0].attribute[0].t, tmp_path, "c.bin")
    onnx.save(proto, tmp_path / "model.onnx")
    direct = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    x = np.ones(4, dtype=np.float32)
    feeds = [{"cond": np.array(flag), "x": x} for flag in (True, False)]
    expected = [direct.run(None, feed)[0] for feed in feeds]
    model = importer.load_model(tmp_path / "model.onnx")
    (tmp_path / "w.bin").unlink()
    (tmp_path / "c.bin").unlink()
    with model:
        result, session = runtime_stage(model)
        assert result.status == "pass", result
        live: Any = session
        actual = [live.run(None, feed)[0] for feed in feeds]
    for got, want in zip(actual, expected, strict=True):
        np.testing.assert_array_equal(got, want)
    assert [list(value) for value in actual] == [[1, 2, 3, 4], [0, 10, 20, 30]]


# --- confinement and failing closed


def test_the_session_runs_on_one_thread_each_way_without_spinning_on_the_cpu_only() -> None:
    data = _model([helper.make_node("Relu", ["x"], ["y"])], [_info("x")], [_info("y")])
    result, session = runtime_stage(importer.load_model_bytes(data))
    assert result.status == "pass"
    live: Any = session
    options = live.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.get_session_config_entry("session.inter_op.allow_spinning") == "0"
    assert options.graph_optimization_level == ort.SessionOptions().graph_optimization_level  # onnxruntime's default
    assert live.get_providers() == ["CPUExecutionProvider"]


def test_without_onnxruntime_the_stage_is_incomplete_and_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import raises ImportError
    data = _model([helper.make_node("Relu", ["x"], ["y"])], [_info("x")], [_info("y")])
    result, session = runtime_stage(importer.load_model_bytes(data))
    assert (result.status, result.reason, session) == ("incomplete", MISSING_ONNXRUNTIME, None)
    assert verdict([result]) == "incomplete"


def test_a_closed_model_or_exhausted_memory_makes_the_stage_incomplete(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _model([helper.make_node("Relu", ["x"], ["y"])], [_info("x")], [_info("y")])
    model = importer.load_model_bytes(data)
    model.close()
    result, session = runtime_stage(model)
    assert (result.status, session) == ("incomplete", None) and "closed" in result.reason

    def out_of_memory(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(ort, "InferenceSession", out_of_memory)
    result, session = runtime_stage(importer.load_model_bytes(data))
    assert (result.status, session) == ("incomplete", None) and "out of memory" in result.reason


def test_an_unknown_onnxruntime_status_is_a_load_failure_at_the_model() -> None:
    model = importer.load_model_bytes(_model([], [_info("x")], [_info("x")]))
    failure = runtime._load_failure(model, _fake_status("Fail", "something broke"))
    assert [(f.code, f.field_path) for f in failure.findings] == [(RUNTIME_LOAD_FAILED, "ModelProto")]
    limit = runtime._load_failure(model, _fake_status("Fail", "std::bad_alloc"))
    assert limit.status == "incomplete"


def _fake_status(kind: str, message: str) -> Exception:
    """An exception of onnxruntime's module with that class name (as its pybind statuses are)."""
    error_type = type(kind, (Exception,), {"__module__": "onnxruntime.capi.onnxruntime_pybind11_state"})
    error: Exception = error_type(message)
    return error
