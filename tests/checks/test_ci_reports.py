"""Reports a CI pipeline can act on (issue 36), in process: the codes' one
table (service/checks/rules.py) and the docs generated from it; SARIF that
GitHub code scanning accepts (every rule with its full description and help,
`security-severity` on security rules, stable `partialFingerprints`,
`automationDetails`, artifacts relative to `originalUriBaseIds`), checked
by Microsoft's SARIF Multitool with GitHub's rules and by the official
schema; a refused model as a result (SARIF error at the refused byte, JUnit
failure); several models in one report, with the worst verdict."""

from __future__ import annotations

import argparse
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from support.paths import REPO
from support.sarif_multitool import multitool_errors
from support.sarif_schema import valid_sarif

from importer.diagnostics import Code
from service.checks import rules
from service.checks.command import check_model, report_uri, shown
from service.checks.junit import junit_log
from service.checks.outcome import Finding, StageResult, incomplete
from service.checks.report import ModelChecks, Refusal, exit_status, worst
from service.checks.rules import MODEL_REFUSED, RULES
from service.checks.runs import CheckRuns, SmokeAsked, runs_of
from service.checks.sarif import FINGERPRINT, sarif_log, sarif_report
from service.checks.stages import shape
from service.sandbox.protocol import ImportFailure, Task, WorkerJob
from service.sandbox.supervisor import WorkerOutcome

STAGE_MODULES = {stage: [REPO / "service" / "checks" / "stages" / f"{stage}.py"] for stage in ("security", "shape", "runtime", "smoke")}
STAGE_MODULES["signature"] = [  # the stage's module, and the front end's findings about the folder's listing
    REPO / "service" / "checks" / "stages" / "model_signature.py",
    REPO / "service" / "checks" / "signature_worker.py",
]

CALLBACK = Finding("security", "error", "python-callback-op", "PyOp runs Python", "cb", "PyOp", "", "ModelProto.graph.node[2]", 120)
DOMAIN = Finding("schema", "warning", "domain-not-checked", "com.x has no schemas", None, None, "com.x", "ModelProto.opset_import[1]", 40)
TYPE = Finding(
    "shape", "error", "declared-type-conflict", "int64 declared, float inferred", "relu", "Relu", "", "ModelProto.graph.node[0]", 60
)
REFUSAL = Refusal("Truncated", "the field's length runs past the end of the file", "ModelProto.graph.node[3].input[1]", 4242)


def _finished(stage: str, *findings: Finding, seconds: float = 0.0) -> StageResult:
    result = StageResult(stage, seconds=seconds)  # type: ignore[arg-type]
    for finding in findings:
        result.add(finding)
    return result.finish()


def passing(name: str = "models/ok/model.onnx") -> ModelChecks:
    return ModelChecks(name, [_finished("schema", seconds=0.0123), _finished("security"), _finished("shape", seconds=0.5)])


def failing(name: str = "models/vad/model.onnx") -> ModelChecks:
    results = [_finished("schema", DOMAIN), _finished("security", CALLBACK), _finished("shape", TYPE)]
    return ModelChecks(name, results, [DOMAIN, CALLBACK, TYPE], sha256="ab" * 32)


def refused(name: str = "models/broken/model.onnx") -> ModelChecks:
    return ModelChecks(name, refusal=REFUSAL)


# --- the codes' one table


def test_the_docs_code_tables_are_the_rules_table() -> None:
    """docs/checks.md and docs/security-findings.md hold the tables generated
    from RULES (`python -m service.checks.rules --write` after a change)."""
    for path, table in ((rules.CHECKS_DOC, rules.checks_table()), (rules.SECURITY_DOC, rules.security_table())):
        document = (REPO / path).read_text(encoding="utf-8")
        assert rules.with_table(document, table) == document, f"{path} is stale: run python -m service.checks.rules --write"


def test_every_code_a_stage_reports_has_a_rule_and_every_rule_is_reported() -> None:
    assert {code.value for code in Code} == {code for code, rule in RULES.items() if rule.stage == "schema"}
    assert {shape.SHAPE_INFERENCE_ERROR, shape.DECLARED_TYPE_CONFLICT, shape.DECLARED_SHAPE_CONFLICT} <= set(RULES)
    for stage, modules in STAGE_MODULES.items():
        source = "".join(module.read_text(encoding="utf-8") for module in modules)
        written = {code for code in re.findall(r'"([a-z]+(?:-[a-z0-9]+)+)"', source) if code in RULES}
        listed = {code for code, rule in RULES.items() if rule.stage == stage}
        assert listed <= written, f"rules of {stage} its module never writes: {sorted(listed - written)}"
    for rule in RULES.values():
        assert rule.meaning and rule.action and rule.severity in ("error", "warning")
        assert (rule.security_severity is not None) == (rule.stage == "security")
        if rule.security_severity is not None:
            assert 0.0 < float(rule.security_severity) <= 10.0


def test_a_changed_table_makes_the_docs_stale() -> None:
    document = (REPO / rules.SECURITY_DOC).read_text(encoding="utf-8")
    assert rules.with_table(document, rules.security_table().replace("Refuse.", "Accept.")) != document


# --- SARIF


def test_every_rule_says_what_it_means_and_what_to_do() -> None:
    log = valid_sarif(sarif_log([failing(), refused()]))
    descriptors = {rule["id"]: rule for rule in log["runs"][0]["tool"]["driver"]["rules"]}
    assert set(descriptors) == {"domain-not-checked", "python-callback-op", "declared-type-conflict", MODEL_REFUSED}
    for code, rule in descriptors.items():
        assert rule["fullDescription"]["markdown"] == RULES[code].meaning
        assert rule["help"]["markdown"] == RULES[code].action
        assert "`" not in rule["fullDescription"]["text"] and rule["help"]["text"]
        assert rule["defaultConfiguration"]["level"] == RULES[code].severity
    assert descriptors["python-callback-op"]["properties"]["security-severity"] == RULES["python-callback-op"].security_severity
    assert "security" in descriptors["python-callback-op"]["properties"]["tags"]
    assert "security-severity" not in descriptors["declared-type-conflict"]["properties"]
    assert log["runs"][0]["tool"]["driver"]["informationUri"].startswith("https://")
    assert log["runs"][0]["automationDetails"] == {"id": "onnx-import/"}


def test_results_name_the_path_as_given_relative_to_the_base() -> None:
    log = valid_sarif(sarif_log([failing("models/vad/model.onnx"), passing("models/asr/model.onnx")], base_uri="file:///work/repo/"))
    run = log["runs"][0]
    assert run["originalUriBaseIds"] == {"SRCROOT": {"uri": "file:///work/repo/"}}
    assert [artifact["location"] for artifact in run["artifacts"]] == [
        {"uri": "models/vad/model.onnx", "uriBaseId": "SRCROOT"},
        {"uri": "models/asr/model.onnx", "uriBaseId": "SRCROOT"},
    ]
    for result in run["results"]:
        assert result["locations"][0]["physicalLocation"]["artifactLocation"] == {
            "uri": "models/vad/model.onnx",
            "uriBaseId": "SRCROOT",
            "index": 0,
        }


def test_fingerprints_are_stable_across_runs_and_offsets() -> None:
    def prints(*findings: Finding) -> list[str]:
        log: Any = sarif_report("m.onnx", [_finished("security", *findings)], findings)
        return [result["partialFingerprints"][FINGERPRINT] for result in log["runs"][0]["results"]]

    moved = Finding("security", "error", "python-callback-op", "another message", "cb", "PyOp", "", "ModelProto.graph.node[2]", 9000)
    elsewhere = Finding("security", "error", "python-callback-op", "PyOp runs Python", "cb", "PyOp", "", "ModelProto.graph.node[7]", 120)
    assert prints(CALLBACK) == prints(CALLBACK) == prints(moved)
    assert prints(CALLBACK) != prints(elsewhere)
    assert len(set(prints(CALLBACK, elsewhere))) == 2


def test_a_refused_model_is_an_error_result_at_the_refused_byte() -> None:
    log = valid_sarif(sarif_log([refused()]))
    run = log["runs"][0]
    (result,) = run["results"]
    assert (result["ruleId"], result["level"]) == (MODEL_REFUSED, "error")
    (location,) = result["locations"]
    assert location["physicalLocation"]["region"] == {"byteOffset": 4242}
    assert location["logicalLocations"][0]["fullyQualifiedName"] == "ModelProto.graph.node[3].input[1]"
    assert result["properties"] == {"kind": "Truncated", "field_path": "ModelProto.graph.node[3].input[1]", "offset": 4242}
    assert "Truncated" in result["message"]["text"] and "past the end" in result["message"]["text"]
    assert run["properties"]["verdict"] == "refused"
    assert run["invocations"][0]["executionSuccessful"] is True  # the tool answered; the answer is the error result


def test_several_models_are_one_run_with_the_worst_verdict_and_each_stage_time() -> None:
    models = [passing(), failing(), refused()]
    log = valid_sarif(sarif_log(models))
    (run,) = log["runs"]
    assert len(run["artifacts"]) == 3
    assert {result["locations"][0]["physicalLocation"]["artifactLocation"]["index"] for result in run["results"]} == {1, 2}
    assert run["properties"]["verdict"] == "refused"
    assert [entry["verdict"] for entry in run["properties"]["models"]] == ["pass", "fail", "refused"]
    seconds = run["invocations"][0]["properties"]["stage_seconds"]
    assert seconds[0] == {"artifactIndex": 0, "seconds": {"schema": 0.012, "security": 0.0, "shape": 0.5}}
    assert (worst(model.verdict for model in models), exit_status(models)) == ("refused", 2)
    assert exit_status([passing(), failing()]) == 1 and exit_status([passing()]) == 0
    assert exit_status([passing(), ModelChecks("x.onnx", [incomplete("shape", "killed")])]) == 2


# --- JUnit


def test_junit_of_several_models_with_a_refused_one() -> None:
    root = ET.fromstring(junit_log([passing(), failing(), refused()]).encode())
    suites = {suite.attrib["name"]: suite for suite in root}
    assert list(suites) == ["onnx-import.import", "onnx-import.schema", "onnx-import.security", "onnx-import.shape"]
    imported = suites["onnx-import.import"]
    assert (imported.attrib["tests"], imported.attrib["failures"]) == ("3", "1")
    (failure,) = imported.iter("failure")
    assert failure.attrib["type"] == "Truncated"
    assert "ModelProto.graph.node[3].input[1] (byte offset 4242)" in failure.attrib["message"]
    security = suites["onnx-import.security"]
    assert [case.attrib["name"] for case in security] == ["models/ok/model.onnx", "models/vad/model.onnx"]
    assert (security.attrib["tests"], security.attrib["failures"]) == ("2", "1")
    assert suites["onnx-import.shape"].find("testcase").attrib["time"] == "0.500"  # type: ignore[union-attr]
    assert root.attrib["failures"] == "3" and root.attrib["tests"] == "9"


# --- GitHub code scanning's rules (the SARIF Multitool)


@pytest.mark.parametrize(
    "models",
    [[passing()], [failing()], [refused()], [passing(), failing(), refused()],
     [ModelChecks("m.onnx", [_finished("schema"), incomplete("shape", "onnx is not installed")])]],
    ids=["passing", "failing", "refused", "several", "incomplete"],
)  # fmt: skip
def test_the_multitool_finds_no_error(models: list[ModelChecks]) -> None:
    """A process: the Multitool is a .NET program of its own."""
    for base in (None, Path("/work/repo").as_uri() + "/"):
        log = sarif_log(models, base_uri=base)
        valid_sarif(log)
        assert multitool_errors(log) == []


def test_the_multitool_check_is_live() -> None:
    """What the test above relies on: the Multitool reports a rule without its description or help (GH2012)."""
    log: Any = sarif_log([failing()])
    for rule in log["runs"][0]["tool"]["driver"]["rules"]:
        del rule["fullDescription"], rule["help"]
    assert any(error.startswith("GH2012") for error in multitool_errors(log))


def test_the_command_line_names_a_path_as_given_relative_to_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "repo"
    (work / "models" / "vad").mkdir(parents=True)
    monkeypatch.chdir(work)
    assert shown(Path("models/vad/model.onnx")) == "models/vad/model.onnx"
    assert shown(work / "models" / "vad" / "model.onnx") == "models/vad/model.onnx"  # absolute, under the working directory
    assert shown(Path("models/../models/vad/model.onnx")) == "models/vad/model.onnx"
    outside = shown(Path("../elsewhere/my model.onnx"))
    assert outside == (tmp_path / "elsewhere" / "my model.onnx").as_posix()
    assert report_uri("models/vad/model.onnx") == "models/vad/model.onnx"
    assert report_uri(outside) == (tmp_path / "elsewhere" / "my model.onnx").as_uri()
    models = [failing("models/vad/model.onnx"), ModelChecks(outside, [_finished("schema", DOMAIN)], [DOMAIN], uri=report_uri(outside))]
    log = valid_sarif(sarif_log(models, base_uri=work.as_uri() + "/"))
    assert [artifact["location"] for artifact in log["runs"][0]["artifacts"]] == [
        {"uri": "models/vad/model.onnx", "uriBaseId": "SRCROOT"},
        {"uri": report_uri(outside)},  # outside the base: an absolute file URI of its own
    ]
    assert multitool_errors(log) == []


def test_the_service_keeps_each_stage_time_for_its_reports() -> None:
    """A tenant's stored runs (service/checks/runs.py) keep each stage's time:
    the summary's `checks.STAGE.seconds`, and the reports made from the runs."""
    results = [_finished("schema", seconds=0.01234), _finished("security", CALLBACK, seconds=0.5)]
    runs = CheckRuns.from_bytes(runs_of(results, [CALLBACK], SmokeAsked(), "2026-01-01T00:00:00.000Z").to_bytes())
    assert runs is not None
    assert [entry["seconds"] for entry in (run.entry() for run in runs.stages.values())] == [0.012, 0.5]
    log: Any = sarif_report("m.onnx", runs.results(), [Finding.from_dict(item) for item in runs.findings])
    assert log["runs"][0]["invocations"][0]["properties"]["stage_seconds"] == [
        {"artifactIndex": 0, "seconds": {"schema": 0.012, "security": 0.5}}
    ]
    suites = {suite.attrib["name"]: suite for suite in ET.fromstring(junit_log([ModelChecks("m.onnx", runs.results())]).encode())}
    assert suites["onnx-import.security"].attrib["time"] == "0.500"
    old = json.loads(runs.to_bytes())
    for stage in old["stages"].values():
        del stage["seconds"]  # a run stored before stage times
    assert CheckRuns.model_validate(old).stages["schema"].seconds == 0.0


class _EndedSandbox:
    """A sandbox whose import worker ends as `outcome` says (the command line's mapping of it is what is tested)."""

    def __init__(self, outcome: WorkerOutcome) -> None:
        self.outcome = outcome

    def job(self, task: Task, **details: Any) -> WorkerJob:
        return WorkerJob(task, 1 << 30, 10, 100, **details)

    def run(self, job: WorkerJob, streams: object, *rest: object) -> WorkerOutcome:
        return self.outcome  # the externals listing too: its files then count as none (refused: said by the import)


def test_a_refusal_is_a_result_and_a_worker_without_an_answer_leaves_every_stage_incomplete(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"\x08\x07")
    args = argparse.Namespace(external_data_dir=None, stages=("schema", "security", "shape"), dims=())
    error = ImportFailure(kind="Truncated", message="cut short", input="m.onnx", offset=2, field_path="ModelProto.graph")
    refused = check_model(_EndedSandbox(WorkerOutcome("error", error=error)), model, args, tmp_path)  # type: ignore[arg-type]
    assert (refused.verdict, refused.refusal, refused.results) == ("refused", Refusal("Truncated", "cut short", "ModelProto.graph", 2), ())
    ended = WorkerOutcome("resource_limit", detail="the import ran past the 0.1 s deadline")
    killed = check_model(_EndedSandbox(ended), model, args, tmp_path)  # type: ignore[arg-type]
    assert killed.refusal is None and killed.verdict == "incomplete" and exit_status([killed]) == 2
    assert [(result.stage, result.status) for result in killed.results] == [(stage, "incomplete") for stage in args.stages]
    assert all("resource_limit" in result.reason and "0.1 s deadline" in result.reason for result in killed.results)
    log = valid_sarif(sarif_log([killed]))
    assert log["runs"][0]["results"] == [] and log["runs"][0]["invocations"][0]["executionSuccessful"] is False
