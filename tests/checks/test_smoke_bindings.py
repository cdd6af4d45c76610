"""The smoke run tries more than batch 1 (issue 56), in process.

- Every dimension left unbound (symbolic, or without a name) is tried at 1,
  then at a second binding (2, or `second_dim`: --smoke-second-dim); the
  stage passes only if both runs do. A model whose exporter baked the traced
  batch into a Reshape target runs at 1 and fails at 2: the finding is at
  the node onnxruntime names, and says which binding broke it. An output
  shape found wrong only at the second binding says so too.
- The bindings come from, in order: the request's `dim=` (strict), the
  model's own metadata (`onnx_import.dims`), a registry's `soft_dims` (both
  lenient: used only where the model has a free place nothing bound before),
  then the defaults. Nothing left unbound, or `second_dim` 1: one run.
- The stage's result lists each run's bindings and where each came from; the
  summary (`checks.smoke.bindings`, `binding_sources`), the SARIF and
  `bindings_text` (a registry's tag) carry them, and a stored smoke run asked
  other bindings or another second binding is run again (`stages_missing`).
"""

from __future__ import annotations

import json
from multiprocessing import Pipe
from typing import Any

import onnx
import pytest
from support.batch_models import any_batch, baked_batch, rotary_cache_of_batch_1
from support.small_models import unnamed_reshape

import importer
from service.checks.bindings_text import bindings_text
from service.checks.outcome import StageResult, verdict
from service.checks.runs import CheckRuns, SmokeAsked, runs_of, stages_missing
from service.checks.sarif import sarif_report
from service.checks.stages import in_worker
from service.checks.stages.runtime import runtime_stage
from service.checks.stages.smoke import SMOKE_OUTPUT_SHAPE, SMOKE_RUN_FAILED, smoke_stage
from service.sandbox.protocol import StageReport, WorkerJob

pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (the `runtime` extra)")


def _smoke(data: bytes, dims: dict[str, int] | None = None, **kwargs: Any) -> tuple[StageResult, list[object]]:
    model = importer.load_model_bytes(data)
    loaded, session = runtime_stage(model)
    assert loaded.status == "pass", loaded
    sink: list[object] = []
    return smoke_stage(session, model, dims or {}, outputs_sink=sink, **kwargs), sink


# --- the second binding


def test_a_batch_baked_into_a_reshape_fails_at_the_second_binding_at_its_node() -> None:
    data = baked_batch()
    result, _ = _smoke(data)
    [finding] = result.findings
    model = importer.load_model_bytes(data)
    assert (result.status, finding.code, finding.node_name) == ("fail", SMOKE_RUN_FAILED, "Reshape_3")
    assert (finding.field_path, finding.offset) == ("ModelProto.graph.node[1]", model.graph.proto.node[1].offset)
    assert finding.message.startswith("the run on synthetic inputs at the second binding (batch=2) failed ")
    assert "--smoke-second-dim" in finding.message and "Reshape" in finding.message  # onnxruntime's own words follow
    assert result.bindings == [{"batch": 1}, {"batch": 2}] and result.binding_sources == {"batch": "default"}
    assert verdict([result]) == "fail"


def test_rotary_caches_traced_at_batch_1_fail_at_the_second_binding_with_onnxruntimes_words() -> None:
    result, _ = _smoke(rotary_cache_of_batch_1())
    [finding] = result.findings
    assert (result.status, finding.code, finding.node_name) == ("fail", SMOKE_RUN_FAILED, "RotaryEmbedding_7")
    assert "at the second binding (batch=2) failed" in finding.message
    assert "'cos_cache' and 'sin_cache' are expected to have the same shape as input 'x', got 1 and" in finding.message


def test_a_dimension_without_a_name_is_named_by_input_and_axis() -> None:
    result, _ = _smoke(baked_batch(batch=None))
    [finding] = result.findings
    assert finding.node_name == "Reshape_3" and "at the second binding (x[0]=2) failed" in finding.message
    assert result.bindings == [{"x[0]": 1}, {"x[0]": 2}] and result.binding_sources == {"x[0]": "default"}


def test_a_model_fine_at_both_bindings_passes_and_lists_both_runs() -> None:
    result, sink = _smoke(any_batch())
    assert (result.status, result.findings) == ("pass", []), result
    assert result.bindings == [{"batch": 1}, {"batch": 2}] and result.binding_sources == {"batch": "default"}
    [first] = sink  # the first run's outputs
    assert getattr(first, "shape", None) == (1, 4)
    assert result.as_dict()["bindings"] == [{"batch": 1}, {"batch": 2}]


def test_another_second_binding_is_named_and_1_runs_once() -> None:
    result, _ = _smoke(baked_batch(), second_dim=3)
    assert result.bindings == [{"batch": 1}, {"batch": 3}] and "at the second binding (batch=3)" in result.findings[0].message
    once, _ = _smoke(baked_batch(), second_dim=1)
    assert (once.status, once.bindings, once.binding_sources) == ("pass", [{"batch": 1}], {"batch": "default"})


def test_an_output_shape_wrong_only_at_the_second_binding_names_it() -> None:
    # unnamed_reshape: x [?, ?] to [2, -1], y declared [2, ?]. Bound x[0]:2, x[1] is left: at 1, y is [2, 1];
    # at 2, [2, 2]. Declared [2, 1] instead, the second run's output is the wrong shape.
    proto = onnx.load_from_string(unnamed_reshape())
    proto.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 1
    result, _ = _smoke(proto.SerializeToString(), dims={"x[0]": 2})
    [finding] = result.findings
    assert (result.status, finding.code, finding.field_path) == ("fail", SMOKE_OUTPUT_SHAPE, "ModelProto.graph.output[0]")
    assert "the run gave 2" in finding.message and "at the second binding (x[0]=2, x[1]=2)" in finding.message
    assert result.binding_sources == {"x[0]": "request", "x[1]": "default"}


def test_nothing_left_unbound_is_one_run() -> None:
    result, _ = _smoke(baked_batch(), dims={"batch": 1})
    assert (result.status, result.bindings, result.binding_sources) == ("pass", [{"batch": 1}], {"batch": "request"})
    fixed, _ = _smoke(unnamed_reshape(), dims={"x[0]": 2, "x[1]": 3})
    assert fixed.bindings == [{"x[0]": 2, "x[1]": 3}]


# --- where the bindings come from


def test_the_request_binding_comes_before_the_models_and_the_registrys() -> None:
    data = baked_batch(metadata={"onnx_import.dims": "batch:3"})
    result, _ = _smoke(data, dims={"batch": 1}, soft_dims={"batch": 5})
    assert (result.status, result.bindings, result.binding_sources) == ("pass", [{"batch": 1}], {"batch": "request"})


def test_the_models_own_metadata_binds_and_comes_before_the_registry() -> None:
    data = baked_batch(metadata={"onnx_import.dims": "batch:1"})
    result, _ = _smoke(data, soft_dims={"batch": 2})
    assert (result.status, result.bindings, result.binding_sources) == ("pass", [{"batch": 1}], {"batch": "model"})
    # Lenient: what names no free place, or is no binding, is left; what fits is used.
    stated = "nosuch:3, x[1]:5,x[9]:2,garbage,batch:1"
    result, _ = _smoke(baked_batch(metadata={"onnx_import.dims": stated}))
    assert (result.status, result.bindings, result.binding_sources) == ("pass", [{"batch": 1}], {"batch": "model"})
    result, _ = _smoke(baked_batch(batch=None, metadata={"onnx_import.dims": "x[0]:1"}))
    assert (result.status, result.bindings, result.binding_sources) == ("pass", [{"x[0]": 1}], {"x[0]": "model"})


def test_a_registrys_bindings_are_used_where_they_fit_and_left_where_they_do_not() -> None:
    result, _ = _smoke(baked_batch(), soft_dims={"batch": 1, "nosuch": 7, "x[1]": 5, "y[0]": 3})
    assert (result.status, result.bindings, result.binding_sources) == ("pass", [{"batch": 1}], {"batch": "registry"})
    # x[0] is a free axis without a name: an axis binding takes it; one of two free axes leaves the other to the defaults.
    result, _ = _smoke(unnamed_reshape(), soft_dims={"x[0]": 2})
    assert result.status == "pass" and result.bindings == [{"x[0]": 2, "x[1]": 1}, {"x[0]": 2, "x[1]": 2}]
    assert result.binding_sources == {"x[0]": "registry", "x[1]": "default"}
    # A registry's axis binding of a symbolic dimension binds its name.
    result, _ = _smoke(baked_batch(), soft_dims={"x[0]": 1})
    assert (result.status, result.binding_sources) == ("pass", {"batch": "registry"})


def _check_worker(data: bytes, **job: Any) -> StageResult:
    """The smoke stage as the check worker runs it from a job (here, in process), and as its report reads back."""
    work = WorkerJob("checks", 1 << 30, 60, 10, checks=("runtime", "smoke"), **job)
    reading, writing = Pipe(duplex=False)
    model = importer.load_model_bytes(data)
    in_worker.send_checks(writing, model, work, "test")
    while reading.poll():
        sent = reading.recv_bytes()
        if json.loads(sent).get("stage") == "smoke":
            return StageReport.model_validate_json(sent).result()
    raise AssertionError("no smoke report")


def test_the_worker_job_carries_the_registrys_bindings_and_the_second_binding() -> None:
    assert _check_worker(baked_batch()).bindings == [{"batch": 1}, {"batch": 2}]  # the job's default: 2
    registry = _check_worker(baked_batch(), soft_dims=(("batch", 1), ("nosuch", 3)))
    assert (registry.status, registry.bindings, registry.binding_sources) == ("pass", [{"batch": 1}], {"batch": "registry"})
    again = _check_worker(baked_batch(), dims=(("batch", 2),), soft_dims=(("batch", 1),))
    assert (again.status, again.bindings, again.binding_sources) == ("fail", [{"batch": 2}], {"batch": "request"})
    assert "at the first binding (batch=2) failed" in again.findings[0].message
    once = _check_worker(any_batch(batch=None), smoke_second_dim=1)
    assert (once.status, once.bindings, once.binding_sources) == ("pass", [{"x[0]": 1}], {"x[0]": "default"})


# --- what the reports say


def test_bindings_text_gives_each_dimension_once_with_its_values() -> None:
    assert bindings_text([{"batch": 1, "x[1]": 1}, {"batch": 2, "x[1]": 2}]) == "batch=1,2; x[1]=1,2"
    assert bindings_text([{"seq": 16, "batch": 1}, {"seq": 16, "batch": 2}]) == "seq=16; batch=1,2"
    assert bindings_text([{"batch": 1}]) == "batch=1" and bindings_text([]) == ""


def test_the_summary_and_the_sarif_say_which_bindings_ran() -> None:
    result, _ = _smoke(baked_batch())
    runs = CheckRuns.from_bytes(runs_of([result], result.findings, SmokeAsked(), "2026-01-01T00:00:00.000Z").to_bytes())
    assert runs is not None
    entry = runs.stages["smoke"].entry()
    assert entry["bindings"] == [{"batch": 1}, {"batch": 2}] and entry["binding_sources"] == {"batch": "default"}
    log: Any = sarif_report("baked.onnx", runs.results(), result.findings)
    [run] = log["runs"]
    [smoke_bindings] = run["invocations"][0]["properties"]["smoke_bindings"]
    assert smoke_bindings["text"] == "batch=1,2" and smoke_bindings["bindings"] == [{"batch": 1}, {"batch": 2}]
    assert smoke_bindings["binding_sources"] == {"batch": "default"}
    assert run["properties"]["checks"]["smoke"]["bindings"] == [{"batch": 1}, {"batch": 2}]
    assert "at the second binding (batch=2)" in run["results"][0]["message"]["text"]


def test_a_smoke_run_asked_other_bindings_or_another_second_binding_runs_again() -> None:
    result, _ = _smoke(any_batch())
    asked = SmokeAsked((("batch", 4),), (("seq", 8),), 2)
    runs = runs_of([result], [], asked, "2026-01-01T00:00:00.000Z")
    assert stages_missing(runs, ("smoke",), asked) == ()
    assert stages_missing(runs, ("smoke",), SmokeAsked((("batch", 4),), (("seq", 8),), 3)) == ("runtime", "smoke")
    assert stages_missing(runs, ("smoke",), SmokeAsked((("batch", 4),), (), 2)) == ("runtime", "smoke")
    assert stages_missing(runs, ("smoke",), SmokeAsked((), (("seq", 8),), 2)) == ("runtime", "smoke")
    # A smoke run stored before the second binding (no second_dim kept) ran at 1 only: it is run again.
    stored = runs.model_dump(mode="json")
    for key in ("second_dim", "soft_dims", "bindings", "binding_sources"):
        del stored["stages"]["smoke"][key]
    earlier = CheckRuns.model_validate(stored)
    assert stages_missing(earlier, ("smoke",), SmokeAsked((("batch", 4),))) == ("runtime", "smoke")
    assert stages_missing(earlier, ("smoke",), SmokeAsked((("batch", 4),), second_dim=1)) == ()
