"""The CI reports of the check stages (service/checks/sarif.py, service/checks/junit.py).

SARIF logs are validated against the official SARIF 2.1.0 schema shipped in
tests/support/schemas (with the validator that schema declares, and a check
of its `uri` and `uri-reference` formats), for a passing model, a failing one
with findings in several stages and hostile names, an incomplete one and a
skipped smoke run; then the fields a CI consumer acts on are asserted: levels,
rule ids, byte offsets, logical locations, `executionSuccessful` and the
notifications. JUnit reports are parsed back (expat refuses any character
XML 1.0 forbids) and their counts and texts checked.

No JUnit XSD is validated against: lxml, which the XSD would need, is not
installed.
"""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from support.sarif_schema import is_uri, is_uri_reference, sarif_validator, valid_sarif

from importer.errors import MAX_MESSAGE_CHARS
from service.checks.junit import MAX_BODY_CHARS, junit_report
from service.checks.outcome import MAX_FINDINGS_PER_STAGE, Finding, StageResult, incomplete
from service.checks.sarif import TOOL_NAME, artifact_uri, sarif_report, visible

BIDI = "\u202e\u2066\u200f"  # right-to-left override, left-to-right isolate, right-to-left mark
HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")
HOSTILE_MODEL = 'dir/../mod\x1b[31mel "v1" <&> \u202egnp.onnx\u00e9\u4e2d.onnx'
HOSTILE_NODE = "conv\x00\x07\u202e1\"' <b>\u00e9\u4e2d\U0001f600"
SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def _valid(log: dict[str, object]) -> dict[str, Any]:
    """`log` as a reader gets it (JSON text, UTF-8), validated against the schema."""
    return valid_sarif(json.dumps(log, ensure_ascii=False).encode("utf-8"))


def _finished(stage: str, *findings: Finding) -> StageResult:
    result = StageResult(stage)  # type: ignore[arg-type]
    for finding in findings:
        result.add(finding)
    return result.finish()


def _passing() -> list[StageResult]:
    return [_finished("schema"), _finished("security"), _finished("shape")]


def _failing() -> tuple[list[StageResult], list[Finding]]:
    schema = [
        Finding(
            "schema",
            "error",
            "unknown-op",
            f"no op {HOSTILE_NODE!r} in domain ''",
            HOSTILE_NODE,
            "Cnv\u202e",
            "",
            "ModelProto.graph.node[3]",
            1234,
        ),
        Finding(
            "schema",
            "warning",
            "domain-not-checked",
            "domain 'com.x' has no schemas",
            None,
            None,
            "com.x",
            "ModelProto.opset_import[1]",
            40,
        ),
    ]
    security = [
        Finding(
            "security",
            "error",
            "static-output-too-large",
            "Range asks for 17 GB " + "x" * 100_000,
            "range",
            "Range",
            "",
            "ModelProto.graph.node[0]",
            17,
        ),
        Finding(
            "security",
            "error",
            "control-characters",
            f"the name holds {BIDI} and \x1b[2J",
            HOSTILE_NODE,
            "Cnv",
            "",
            "ModelProto.graph.node[3].name",
            1240,
        ),
        Finding("security", "error", "unknown-op", "the same code in a second stage", "n", "Op", "", "ModelProto.graph.node[5]", 2000),
    ]
    shape = [
        Finding(
            "shape",
            "warning",
            "shape-mismatch",
            "declared [1, 3] inferred [1, 4]\r\nforged line",
            "mm",
            "MatMul",
            "",
            "ModelProto.graph.node[4]",
            1500,
        )
    ]
    results = [_finished("schema", *schema), _finished("security", *security), _finished("shape", *shape)]
    return results, [*schema, *security, *shape]


def _notifications(log: dict[str, Any]) -> list[dict[str, Any]]:
    notes: list[dict[str, Any]] = log["runs"][0]["invocations"][0].get("toolExecutionNotifications", [])
    return notes


# --- SARIF


def test_a_passing_model_is_a_valid_successful_run_without_results() -> None:
    log = _valid(sarif_report("model.onnx", _passing(), [], model_id="m-1", model_sha256=SHA.upper(), tool_version="1.2.3"))
    assert log["version"] == "2.1.0"
    (run,) = log["runs"]
    assert run["tool"]["driver"]["name"] == TOOL_NAME
    assert run["tool"]["driver"]["version"] == "1.2.3"
    assert run["results"] == []
    assert run["invocations"] == [
        {
            "executionSuccessful": True,
            "properties": {"stage_seconds": [{"artifactIndex": 0, "seconds": {"schema": 0.0, "security": 0.0, "shape": 0.0}}]},
        }
    ]
    assert run["artifacts"][0]["location"]["uri"] == "model.onnx"
    assert run["artifacts"][0]["hashes"] == {"sha-256": SHA}
    assert run["properties"]["verdict"] == "pass"
    assert run["properties"]["model_id"] == "m-1"
    assert run["properties"]["checks"] == {
        stage: {"status": "pass", "errors": 0, "warnings": 0} for stage in ("schema", "security", "shape")
    }


def test_the_tool_version_defaults_to_the_installed_distribution() -> None:
    from importlib.metadata import version

    log = sarif_report("m.onnx", _passing(), [])
    assert log["runs"][0]["tool"]["driver"]["version"] == version("onnx-import-service")  # type: ignore[index]


def test_a_failing_model_places_every_finding() -> None:
    results, findings = _failing()
    log = _valid(sarif_report(HOSTILE_MODEL, results, findings, model_sha256=SHA))
    (run,) = log["runs"]
    assert run["properties"]["verdict"] == "fail"
    assert run["properties"]["checks"]["security"] == {"status": "fail", "errors": 3, "warnings": 0}
    assert run["properties"]["checks"]["shape"] == {"status": "pass", "errors": 0, "warnings": 1}
    assert run["invocations"][0]["executionSuccessful"] is True  # the checks failed the model; the tool did not fail
    assert "toolExecutionNotifications" not in run["invocations"][0]

    rules = run["tool"]["driver"]["rules"]
    assert [rule["id"] for rule in rules] == [
        "unknown-op",
        "domain-not-checked",
        "static-output-too-large",
        "control-characters",
        "shape-mismatch",
    ]
    assert [rule["properties"]["stage"] for rule in rules] == ["schema", "schema", "security", "security", "shape"]
    assert all(rule["shortDescription"]["text"] for rule in rules)

    sarif_results = run["results"]
    assert len(sarif_results) == len(findings)
    uri = run["artifacts"][0]["location"]["uri"]
    for finding, result in zip(findings, sarif_results, strict=True):
        assert result["ruleId"] == finding.code
        assert rules[result["ruleIndex"]]["id"] == finding.code
        assert result["level"] == finding.severity
        (location,) = result["locations"]
        assert location["physicalLocation"]["artifactLocation"] == {"uri": uri, "index": 0, "uriBaseId": "SRCROOT"}
        assert location["physicalLocation"]["region"] == {"byteOffset": finding.offset}
        (logical,) = location["logicalLocations"]
        assert logical["fullyQualifiedName"] == finding.field_path
        assert logical.get("name") == (visible(finding.node_name) if finding.node_name else None)
        # the exact names, for tools that match them
        assert result["properties"] == {
            "stage": finding.stage,
            "node_name": finding.node_name,
            "op_type": finding.op_type,
            "domain": finding.domain,
        }
        assert result["message"]["text"]


def test_hostile_text_is_bounded_and_shown_not_obeyed() -> None:
    results, findings = _failing()
    log = _valid(sarif_report(HOSTILE_MODEL, results, findings))
    run = log["runs"][0]
    texts = [result["message"]["text"] for result in run["results"]]
    texts += [logical.get("name", "") for result in run["results"] for logical in result["locations"][0]["logicalLocations"]]
    for text in texts:
        assert not HIDDEN.search(text), text
    assert "\\u202e" in run["results"][3]["message"]["text"] and "\\x1b[2J" in run["results"][3]["message"]["text"]
    assert "\\x0d\nforged line" in run["results"][5]["message"]["text"]  # the carriage return shown, the newline kept
    assert len(run["results"][2]["message"]["text"]) <= MAX_MESSAGE_CHARS + 3
    assert run["results"][0]["locations"][0]["logicalLocations"][0]["name"] == visible(HOSTILE_NODE)
    # the model's name: one relative reference, nothing above its base, no scheme, every byte encoded
    assert run["artifacts"][0]["location"]["uri"] == "mod%1B%5B31mel%20%22v1%22%20%3C%26%3E%20%E2%80%AEgnp.onnx%C3%A9%E4%B8%AD.onnx"


@pytest.mark.parametrize(
    ("name", "uri"),
    [
        ("model.onnx", "model.onnx"),
        ("models/resnet 50.onnx", "models/resnet%2050.onnx"),
        ("../../etc/passwd", "etc/passwd"),
        ("/abs/./x.onnx", "abs/x.onnx"),
        ("a/b/../c.onnx", "a/c.onnx"),
        ("c:\\models\\x.onnx", "c%3A%5Cmodels%5Cx.onnx"),
        ("https://evil.example/x", "https%3A/evil.example/x"),
        ("..", "model"),
        ("", "model"),
        ("\u00e9\udcff.onnx", "%C3%A9%FF.onnx"),  # a file name's undecodable byte, as os.fsdecode gives it
    ],
)
def test_the_model_name_is_a_relative_reference(name: str, uri: str) -> None:
    assert artifact_uri(name) == uri
    assert is_uri_reference(uri) and not is_uri(uri)
    _valid(sarif_report(name, _passing(), []))


def test_an_incomplete_stage_fails_the_run_closed() -> None:
    results = [*_passing(), incomplete("runtime", "onnxruntime is not installed \u202e(pip install .[runtime])")]
    log = _valid(sarif_report("m.onnx", results, []))
    run = log["runs"][0]
    assert run["invocations"][0]["executionSuccessful"] is False
    (note,) = _notifications(log)
    assert note["level"] == "error"
    assert note["descriptor"]["id"] == "stage-incomplete"
    assert note["properties"] == {"stage": "runtime", "status": "incomplete"}
    assert "onnxruntime is not installed" in note["message"]["text"] and "\\u202e" in note["message"]["text"]
    assert "stage-incomplete" in [item["id"] for item in run["tool"]["driver"]["notifications"]]
    assert run["properties"]["verdict"] == "incomplete"
    assert run["properties"]["checks"]["runtime"]["status"] == "incomplete"
    assert "\u202e" not in run["properties"]["checks"]["runtime"]["reason"]


def test_an_incomplete_stage_with_a_failing_one() -> None:
    results, findings = _failing()
    log = _valid(sarif_report("m.onnx", [*results, incomplete("runtime", "the worker was killed (memory limit)")], findings))
    run = log["runs"][0]
    assert run["properties"]["verdict"] == "fail"
    assert run["invocations"][0]["executionSuccessful"] is False
    assert [note["level"] for note in _notifications(log)] == ["error"]


def test_a_skipped_smoke_run_is_a_warning_not_a_failure() -> None:
    security = Finding("security", "error", "static-output-too-large", "Range: 17 GB", "r", "Range", "", "ModelProto.graph.node[0]", 17)
    results = [
        _finished("schema"),
        _finished("security", security),
        StageResult.ended("smoke", "skipped", "security estimates an output of 17 GB"),
    ]
    log = _valid(sarif_report("dos.onnx", results, [security]))
    run = log["runs"][0]
    assert run["invocations"][0]["executionSuccessful"] is True
    (note,) = _notifications(log)
    assert note["level"] == "warning"
    assert note["properties"] == {"stage": "smoke", "status": "skipped"}
    assert "17 GB" in note["message"]["text"]
    assert run["properties"]["checks"]["smoke"] == {
        "status": "skipped",
        "errors": 0,
        "warnings": 0,
        "reason": "security estimates an output of 17 GB",
    }
    assert run["properties"]["verdict"] == "fail"


def test_findings_counted_past_the_cap_are_announced() -> None:
    result = StageResult("schema")
    for index in range(MAX_FINDINGS_PER_STAGE + 500):
        result.add(
            Finding(
                "schema", "error", "unknown-op", f"no op {index}", f"n{index}", "Nope", "", f"ModelProto.graph.node[{index}]", 10 + index
            )
        )
    result.finish()
    log = _valid(sarif_report("m.onnx", [result], result.findings))
    assert len(log["runs"][0]["results"]) == MAX_FINDINGS_PER_STAGE
    (note,) = _notifications(log)
    assert note["level"] == "note" and note["descriptor"]["id"] == "findings-not-listed"
    assert f"{MAX_FINDINGS_PER_STAGE + 500} problems" in note["message"]["text"]
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] is True


def test_tens_of_thousands_of_findings_are_reported_in_linear_time() -> None:
    codes = [f"code-{index}" for index in range(50)]
    findings = [
        Finding("schema", "error", codes[index % 50], f"message {index}", f"n{index}", "Op", "", f"ModelProto.graph.node[{index}]", index)
        for index in range(50_000)
    ]
    started = time.perf_counter()
    log: dict[str, Any] = sarif_report("big.onnx", [_finished("schema", *findings)], findings)
    elapsed = time.perf_counter() - started
    run = log["runs"][0]
    assert len(run["results"]) == 50_000
    assert [rule["id"] for rule in run["tool"]["driver"]["rules"]] == codes
    assert run["results"][-1]["locations"][0]["physicalLocation"]["region"] == {"byteOffset": 49_999}
    assert elapsed < 5, f"{elapsed:.1f} s for 50,000 findings"


# --- JUnit


def _suites(text: str) -> tuple[ET.Element, dict[str, ET.Element]]:
    root = ET.fromstring(text.encode("utf-8"))  # expat: any character XML 1.0 forbids is an error here
    assert root.tag == "testsuites"
    return root, {suite.attrib["name"]: suite for suite in root}


def _counts(element: ET.Element) -> dict[str, int]:
    return {key: int(element.attrib[key]) for key in ("tests", "failures", "errors", "skipped")}


def _assert_counts_agree(root: ET.Element) -> None:
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in root:
        cases = suite.findall("testcase")
        counted = {
            "tests": len(cases),
            "failures": sum(len(case.findall("failure")) for case in cases),
            "errors": sum(len(case.findall("error")) for case in cases),
            "skipped": sum(len(case.findall("skipped")) for case in cases),
        }
        assert _counts(suite) == counted, suite.attrib["name"]
        for key, value in counted.items():
            totals[key] += value
    assert _counts(root) == totals


def _all_text(root: ET.Element) -> list[str]:
    return [text for element in root.iter() for text in [element.text or "", element.tail or "", *element.attrib.values()]]


def test_junit_one_suite_per_stage_with_consistent_counts() -> None:
    results, findings = _failing()
    results = [
        *results,
        incomplete("runtime", "onnxruntime is not installed"),
        StageResult.ended("smoke", "skipped", "refused: 17 GB output"),
    ]
    root, suites = _suites(junit_report("model.onnx", results, findings))
    assert list(suites) == [f"{TOOL_NAME}.{stage}" for stage in ("schema", "security", "shape", "runtime", "smoke")]
    _assert_counts_agree(root)
    assert _counts(root) == {"tests": 5, "failures": 2, "errors": 1, "skipped": 1}
    for suite in suites.values():
        (case,) = suite.findall("testcase")
        assert case.attrib["name"] == "model.onnx"
        assert case.attrib["classname"] == suite.attrib["name"]

    schema_case = suites["onnx-import.schema"].find("testcase")
    assert schema_case is not None
    failure = schema_case.find("failure")
    assert failure is not None and failure.text is not None
    assert failure.attrib["type"] == "unknown-op"
    assert "unknown-op at ModelProto.graph.node[3] (byte offset 1234)" in failure.text
    assert "domain-not-checked" not in failure.text  # a warning, not a reason for the failure
    out = schema_case.find("system-out")
    assert out is not None and out.text is not None and "domain-not-checked at ModelProto.opset_import[1] (byte offset 40)" in out.text

    shape_case = suites["onnx-import.shape"].find("testcase")
    assert shape_case is not None and shape_case.find("failure") is None  # warnings only: the stage passed

    runtime_error = suites["onnx-import.runtime"].find("testcase/error")
    assert runtime_error is not None
    assert runtime_error.attrib["type"] == "incomplete"
    assert "onnxruntime is not installed" in runtime_error.attrib["message"]
    skipped = suites["onnx-import.smoke"].find("testcase/skipped")
    assert skipped is not None and skipped.attrib["message"] == "refused: 17 GB output"


def test_junit_of_a_passing_model_has_no_failures() -> None:
    root, _ = _suites(junit_report("model.onnx", _passing(), []))
    _assert_counts_agree(root)
    assert _counts(root) == {"tests": 3, "failures": 0, "errors": 0, "skipped": 0}
    assert all(len(list(case)) == 0 for case in root.iter("testcase"))


def test_junit_hostile_text_is_valid_xml_and_shown_not_obeyed() -> None:
    results, findings = _failing()
    results = [*results, incomplete("runtime", "crashed on \x00\x1b]0;pwned\x07 \u202e\ud800")]
    text = junit_report(HOSTILE_MODEL, results, findings)
    root, suites = _suites(text)
    for piece in _all_text(root):
        assert not HIDDEN.search(piece), repr(piece)
    for case in root.iter("testcase"):
        assert case.attrib["name"] == visible(HOSTILE_MODEL)  # quotes, <, & and non-ASCII round-trip
    security = suites["onnx-import.security"].find("testcase/failure")
    assert security is not None and security.text is not None
    assert "\\u202e" in security.text and "\\x1b[2J" in security.text
    assert "\u00e9\u4e2d\U0001f600" in security.text  # non-ASCII kept as it is
    assert len(max(security.text.splitlines(), key=len)) < MAX_MESSAGE_CHARS * 2  # the long message bounded
    runtime = suites["onnx-import.runtime"].find("testcase/error")
    assert runtime is not None and runtime.text == "crashed on \\x00\\x1b]0;pwned\\x07 \\u202e\\ud800"


def test_junit_failure_bodies_are_bounded() -> None:
    findings = [
        Finding("schema", "error", "unknown-op", "y" * 1000, f"n{index}", "Op", "", f"ModelProto.graph.node[{index}]", index)
        for index in range(5000)
    ]
    result = _finished("schema", *findings)
    root, _ = _suites(junit_report("m.onnx", [result], result.findings))
    failure = root.find("testsuite/testcase/failure")
    assert failure is not None and failure.text is not None
    assert len(failure.text) <= MAX_BODY_CHARS + 100
    listed = failure.text.count("unknown-op at ")
    assert 0 < listed < 5000
    assert failure.text.splitlines()[-1] == f"... and {5000 - listed} more"
    assert failure.attrib["message"].startswith("5000 errors")


def test_the_schema_validation_is_live() -> None:
    """What the tests above rely on: the shipped schema refuses what SARIF forbids."""
    log: dict[str, Any] = json.loads(json.dumps(sarif_report("m.onnx", *_failing())))
    result = log["runs"][0]["results"][0]
    result["level"] = "fatal"
    result["locations"][0]["physicalLocation"]["region"] = {}  # a region must say where it starts
    result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] = "a b"
    del log["runs"][0]["tool"]["driver"]["name"]
    found = {tuple(error.absolute_path)[-1] for error in sarif_validator().iter_errors(log)}
    assert found == {"level", "region", "uri", "driver"}
