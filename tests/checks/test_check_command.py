"""The `onnx-import` console script (declared in pyproject.toml), run as a user
runs it: `onnx-import check MODEL` runs the check stages in the service's
sandboxed workers without a server, and answers by its exit status (0 pass,
1 fail, 2 refused or incomplete, 64 a usage error) and its report (json,
sarif validated against the official schema, junit), to standard output or
`--output`; many files and folders make one report (a refused model a result
in it) whose exit status is the worst model's; `--external-data-dir` finds external data elsewhere and
`--dim` binds the smoke run's symbolic dimensions, and dimensions without a
name by input and axis (`--dim x[0]:2`); a binding the model has no place
for exits 64; a model broken at batch 2 fails at the second binding, which
`--smoke-second-dim 1` leaves out; a model whose function
calls would inline past `--max-inlined-nodes` fails at once; an external
tensor past 2 GiB is refused unless `--max-tensor-bytes` allows it; `--checks signature`
verifies a folder's model.sig against `--trusted-signers` (exit 0 signed, 1 changed, 1 without
one under `--require-signature`, 64 for a trusted-signers file that is not there). `python -m importer
check` keeps giving the operator check alone."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from support.batch_models import baked_batch
from support.fanout_model import fanout_model
from support.past_2gib_model import past_2gib_model
from support.sarif_multitool import multitool_errors
from support.sarif_schema import valid_sarif
from support.service_harness import SAMPLES
from support.signed_folders import SIGNATURE, signed_model_folder
from support.small_models import unnamed_reshape
from support.training_info_model import FIELD_PATH as TRAINING_FIELD_PATH
from support.training_info_model import training_info_model

COMMAND = Path(sys.executable).with_name("onnx-import")
ALL = "schema,security,shape,runtime,smoke"


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert COMMAND.exists(), "the console script is installed with the project (pyproject.toml [project.scripts])"
    return subprocess.run([str(COMMAND), *map(str, args)], capture_output=True, text=True, timeout=300)


def wrong_type(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "wrong_type",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, ["batch", 2])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_sound_model_passes_every_stage() -> None:
    done = run("check", SAMPLES / "external" / "model.onnx", "--checks", ALL)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "pass" and set(report["checks"]) == set(ALL.split(","))
    assert all(entry["status"] == "pass" for entry in report["checks"].values())


def test_a_failing_model_exits_1_with_its_findings_placed(tmp_path: Path) -> None:
    done = run("check", wrong_type(tmp_path / "wrong.onnx"), "--checks", "shape", "--checks", "smoke", "--dim", "batch:3")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "fail" and report["checks"]["shape"]["status"] == "fail"
    shape = [item for item in report["diagnostics"] if item["stage"] == "shape"]
    assert shape and shape[0]["field_path"] == "ModelProto.graph.node[0]" and shape[0]["node_name"] == "relu"


def test_reports_go_to_a_file_as_sarif_or_junit(tmp_path: Path) -> None:
    model = wrong_type(tmp_path / "wrong.onnx")
    sarif = tmp_path / "report.sarif"
    assert run("check", model, "--format", "sarif", "--output", sarif).returncode == 1
    log = valid_sarif(sarif.read_text(encoding="utf-8"))
    assert any(result["ruleId"] == "declared-type-conflict" for result in log["runs"][0]["results"])
    assert multitool_errors(log) == []  # GitHub code scanning's rules
    junit = run("check", model, "--format", "junit")
    assert junit.returncode == 1
    assert ET.fromstring(junit.stdout.encode()).find("testsuite/testcase/failure") is not None


def test_external_data_elsewhere(tmp_path: Path) -> None:
    shutil.copy(SAMPLES / "external" / "model.onnx", tmp_path / "model.onnx")
    assert run("check", tmp_path / "model.onnx", "--checks", "runtime").returncode == 2, "refused: its external data is missing"
    done = run("check", tmp_path / "model.onnx", "--checks", "runtime", "--external-data-dir", SAMPLES / "external")
    assert done.returncode == 0, done.stdout + done.stderr


def test_many_paths_files_and_folders_make_one_report_with_the_worst_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files and folders (every .onnx under a folder, external data beside it)
    through the same workers; one report; the worst model's exit status."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(SAMPLES / "external", tmp_path / "models" / "external")
    shutil.copy(SAMPLES / "add.onnx", tmp_path / "models" / "add.onnx")
    wrong_type(tmp_path / "wrong.onnx")
    broken = tmp_path / "models" / "nested" / "broken.onnx"
    broken.parent.mkdir()
    broken.write_bytes((SAMPLES / "add.onnx").read_bytes()[:120])

    passing = run("check", "models/external", "models/add.onnx")
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert [(item["input"], item["verdict"]) for item in json.loads(passing.stdout)] == [
        ("models/external/model.onnx", "pass"),
        ("models/add.onnx", "pass"),
    ]
    assert all(isinstance(entry["seconds"], float) for item in json.loads(passing.stdout) for entry in item["checks"].values())
    assert run("check", "models/add.onnx", "wrong.onnx").returncode == 1

    sarif = run("check", "models", "wrong.onnx", "--format", "sarif")
    assert sarif.returncode == 2, sarif.stderr
    log = valid_sarif(sarif.stdout)
    (sarif_run,) = log["runs"]
    assert [artifact["location"]["uri"] for artifact in sarif_run["artifacts"]] == [
        "models/add.onnx",
        "models/external/model.onnx",
        "models/nested/broken.onnx",
        "wrong.onnx",
    ]
    assert sarif_run["originalUriBaseIds"]["SRCROOT"]["uri"] == tmp_path.resolve().as_uri() + "/"
    refused = [result for result in sarif_run["results"] if result["ruleId"] == "model-refused"]
    assert [result["locations"][0]["physicalLocation"]["artifactLocation"]["index"] for result in refused] == [2]
    assert [entry["verdict"] for entry in sarif_run["properties"]["models"]] == ["pass", "pass", "refused", "fail"]
    stage_seconds = sarif_run["invocations"][0]["properties"]["stage_seconds"]
    assert set(stage_seconds[0]["seconds"]) == {"schema", "security", "shape"} and stage_seconds[2]["seconds"] == {}
    assert multitool_errors(log) == []

    junit = run("check", "models", "--format", "junit")
    assert junit.returncode == 2
    suites = {suite.attrib["name"]: suite for suite in ET.fromstring(junit.stdout.encode())}
    assert [case.attrib["name"] for case in suites["onnx-import.import"].iter("testcase")] == [
        "models/add.onnx",
        "models/external/model.onnx",
        "models/nested/broken.onnx",
    ]
    assert len(list(suites["onnx-import.import"].iter("failure"))) == 1
    assert float(suites["onnx-import.shape"].attrib["time"]) > 0
    assert run("check", "models/nested/none").returncode == 64
    (tmp_path / "empty").mkdir()
    empty = run("check", "empty")
    assert empty.returncode == 64 and "no .onnx file under" in empty.stderr


def test_a_refused_model_is_a_result_in_sarif_and_a_failure_in_junit(tmp_path: Path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes((SAMPLES / "add.onnx").read_bytes()[:120])
    sarif = run("check", broken, "--format", "sarif")
    assert sarif.returncode == 2
    log = valid_sarif(sarif.stdout)
    (result,) = log["runs"][0]["results"]
    assert (result["ruleId"], result["level"]) == ("model-refused", "error")
    assert result["properties"]["kind"] and result["locations"][0]["physicalLocation"]["region"]["byteOffset"] >= 0
    assert multitool_errors(log) == []
    junit = run("check", broken, "--format", "junit")
    assert junit.returncode == 2
    (failure,) = ET.fromstring(junit.stdout.encode()).iter("failure")
    assert "byte offset" in failure.attrib["message"]


def test_a_refused_file_exits_2_naming_the_place(tmp_path: Path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes((SAMPLES / "add.onnx").read_bytes()[:120])
    done = run("check", broken)
    assert done.returncode == 2
    refusal = json.loads(done.stdout)["refused"]
    assert refusal["kind"] and refusal["input"] == "broken.onnx" and "offset" in refusal


def test_a_model_whose_calls_inline_past_the_bound_fails_at_once_and_reaches_no_other_stage(tmp_path: Path) -> None:
    model = tmp_path / "fanout.onnx"
    onnx.save(fanout_model(40), str(model))  # 3 KB, 2^40 nodes once its functions are inlined
    done = run("check", model)  # the default checks: schema, shape, security
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    # skipped, not incomplete: the count refused it before onnx inlined anything (which would run into the worker's limits)
    assert report["verdict"] == "fail" and report["checks"]["shape"]["status"] == "skipped"
    (finding,) = [item for item in report["diagnostics"] if item["code"] == "function-expansion-too-large"]
    assert (finding["stage"], finding["field_path"]) == ("security", "ModelProto.graph.node[0]")


def test_a_training_info_location_out_of_the_folder_exits_2_naming_the_place(tmp_path: Path) -> None:
    model = tmp_path / "training.onnx"
    onnx.save(training_info_model("../secret.bin"), str(model))
    done = run("check", model)
    assert done.returncode == 2
    refusal = json.loads(done.stdout)["refused"]
    assert (refusal["kind"], refusal["field_path"]) == ("ExternalData", TRAINING_FIELD_PATH)


@pytest.mark.parametrize("args", [("check", "no-such.onnx"), ("check", str(SAMPLES / "add.onnx"), "--checks", "telepathy"),
                                  ("check", str(SAMPLES / "add.onnx"), "--dim", "batch"),
                                  ("check", str(SAMPLES / "add.onnx"), "--max-tensor-bytes", "1GiB")])  # fmt: skip
def test_usage_errors_exit_64(args: tuple[str, ...]) -> None:
    done = run(*args)
    assert done.returncode == 64 and done.stderr.startswith("onnx-import: ") and not done.stdout


def test_an_external_tensor_past_2gib_is_refused_unless_max_tensor_bytes_allows_it(tmp_path: Path) -> None:
    model = past_2gib_model(tmp_path)  # a sparse file: nothing here reads its 2 GiB
    refused = run("check", model)
    assert refused.returncode == 2, refused.stderr
    refusal = json.loads(refused.stdout)["refused"]
    assert (refusal["kind"], refusal["field_path"]) == ("Unsupported", "ModelProto.graph.initializer[0].dims")
    done = run("check", model, "--max-tensor-bytes", "4GiB")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "pass" and set(report["checks"]) == {"schema", "security", "shape"}


def test_python_m_importer_check_keeps_the_operator_check_alone() -> None:
    done = subprocess.run([sys.executable, "-m", "importer", "check", str(SAMPLES / "add.onnx")], capture_output=True, text=True)
    assert done.returncode == 0 and set(json.loads(done.stdout)) == {"diagnostics"}


@pytest.mark.parametrize("checks", ["smoke", "schema"])
def test_a_binding_the_model_has_no_place_for_exits_64(tmp_path: Path, checks: str) -> None:
    # Known only once the model is read: the check worker reports it, whatever the stages asked.
    done = run("check", wrong_type(tmp_path / "wrong.onnx"), "--checks", checks, "--dim", "nosuch:5")
    assert done.returncode == 64 and not done.stdout, done.stderr
    # its last line (warnings of walls this host lacks may come first)
    assert done.stderr.splitlines()[-1].startswith("onnx-import: unknown dimension binding nosuch:5: ") and "'batch'" in done.stderr


def test_dimensions_without_names_are_bound_by_input_and_axis(tmp_path: Path) -> None:
    model = tmp_path / "unnamed.onnx"
    model.write_bytes(unnamed_reshape())
    done = run("check", model, "--checks", "smoke", "--dim", "x[0]:2", "--dim", "x[1]:3")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["checks"]["smoke"]["status"] == "pass"
    done = run("check", model, "--checks", "smoke")
    assert done.returncode == 1, done.stderr
    [finding] = [item for item in json.loads(done.stdout)["diagnostics"] if item["stage"] == "smoke"]
    assert finding["code"] == "smoke-run-failed" and "--dim x[0]:VALUE" in finding["message"]


def test_a_batch_baked_into_a_reshape_fails_at_the_second_binding_unless_set_to_run_once(tmp_path: Path) -> None:
    model = tmp_path / "baked.onnx"
    model.write_bytes(baked_batch())
    done = run("check", model, "--checks", "smoke")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["checks"]["smoke"]["bindings"] == [{"batch": 1}, {"batch": 2}]
    [finding] = [item for item in report["diagnostics"] if item["stage"] == "smoke"]
    assert finding["node_name"] == "Reshape_3" and "at the second binding (batch=2) failed" in finding["message"]
    done = run("check", model, "--checks", "smoke", "--smoke-second-dim", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["checks"]["smoke"]["bindings"] == [{"batch": 1}]


def test_the_signature_stage_verifies_a_signed_folder(tmp_path: Path) -> None:
    folder, signer = signed_model_folder(tmp_path)
    trust = ("--checks", "signature,schema", "--trusted-signers", signer.public_key)
    done = run("check", folder / "model.onnx", *trust)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["checks"]["signature"]["signer_fingerprint"] == signer.fingerprint
    weights = bytearray((folder / "weights.bin").read_bytes())
    weights[0] ^= 1
    (folder / "weights.bin").write_bytes(bytes(weights))
    changed = run("check", folder / "model.onnx", *trust)
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert [item["field_path"] for item in json.loads(changed.stdout)["diagnostics"]] == ["weights.bin"]
    (folder / SIGNATURE).unlink()
    assert run("check", folder / "model.onnx", *trust).returncode == 2  # skipped: incomplete
    assert run("check", folder / "model.onnx", *trust, "--require-signature").returncode == 1
    missing = run("check", folder / "model.onnx", "--checks", "signature", "--trusted-signers", tmp_path / "nosuch.pem")
    assert missing.returncode == 64 and "--trusted-signers" in missing.stderr
