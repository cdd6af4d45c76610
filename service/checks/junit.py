"""The check results as JUnit XML, the test report most CI systems read.

Owns `junit_log` (and `junit_report`, its one-model form):
`<testsuites name="onnx-import">` holding one `<testsuite name="onnx-import.STAGE">`
per stage that was asked for, each with one `<testcase>` per model, named by
the model (its `time` the stage's seconds); a refused model is a `<failure>`
of an `onnx-import.import` suite, with the error's kind, field path and byte
offset. A failed stage's testcase carries a
`<failure>` listing its errors (code, field path, byte offset, node and
message, one a line, bounded); a stage that did not finish carries an
`<error>` with the reason (fail closed: CI counts it against the build); a
skipped one `<skipped>` with the reason. Warnings go to `<system-out>`. The
counts (`tests`, `failures`, `errors`, `skipped`) agree at every level.

Names and messages come from untrusted files: every piece of text goes
through `visible` (service.checks.sarif), so the XML holds no character XML
1.0 forbids and no control or bidirectional-override character reaches a
reader's screen; ElementTree escapes the markup characters.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from typing import Final

from importer.diagnostics import bounded
from service.checks.outcome import STAGES, Finding, StageResult
from service.checks.report import ModelChecks
from service.checks.sarif import TOOL_NAME, visible

MAX_LISTED: Final = 200  # findings written out per stage and kind (errors, warnings)
MAX_BODY_CHARS: Final = 64 * 1024  # the most text one failure or system-out holds


def _place(finding: Finding) -> str:
    place = f"{finding.field_path} (byte offset {finding.offset})"
    if finding.node_name is not None or finding.op_type is not None:
        node = repr(bounded(finding.node_name or ""))
        op = finding.op_type or "?"
        if finding.domain:
            op = f"{finding.domain}::{op}"
        place += f", node {node} ({bounded(op)})"
    return place


def _listing(findings: Sequence[Finding], counted: int) -> str:
    lines: list[str] = []
    size = 0
    for finding in findings[:MAX_LISTED]:
        line = visible(f"{finding.code} at {_place(finding)}: {bounded(finding.message)}")
        if size + len(line) + 1 > MAX_BODY_CHARS:
            break
        lines.append(line)
        size += len(line) + 1
    if counted > len(lines):
        lines.append(f"... and {counted - len(lines)} more")
    return "\n".join(lines)


def _seconds(value: float) -> str:
    return f"{max(value, 0.0):.3f}"


def junit_report(model_name: str, results: Sequence[StageResult], findings: Iterable[Finding]) -> str:
    """The JUnit XML text (UTF-8, with its declaration) of one model's check
    `results`; `findings` are every stage's, as listed (see sarif_report)."""
    return junit_log([ModelChecks(model_name, tuple(results), tuple(findings))])


def junit_log(models: Sequence[ModelChecks]) -> str:
    """The JUnit XML text of several models: a testsuite per stage, a testcase
    per model in each; where a model was refused, an `onnx-import.import`
    suite first, whose testcase of the refused model is a failure naming the
    error's kind, field path and byte offset."""
    root = ET.Element("testsuites", name=TOOL_NAME)
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    suites: dict[str, tuple[ET.Element, dict[str, int], list[float]]] = {}

    def suite_of(stage: str) -> tuple[ET.Element, dict[str, int], list[float]]:
        if stage not in suites:
            element = ET.SubElement(root, "testsuite", name=f"{TOOL_NAME}.{stage}")
            suites[stage] = (element, {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}, [0.0])
        return suites[stage]

    if any(model.refusal is not None for model in models):
        suite, counts, _ = suite_of("import")
        for model in models:
            case = ET.SubElement(suite, "testcase", classname=f"{TOOL_NAME}.import", name=visible(model.name) or "model", time=_seconds(0))
            counts["tests"] += 1
            if model.refusal is not None:
                counts["failures"] += 1
                refusal = model.refusal
                place = f"{refusal.field_path or 'ModelProto'} (byte offset {refusal.offset or 0})"
                element = ET.SubElement(
                    case, "failure", message=visible(bounded(f"refused: {refusal.kind} at {place}")), type=visible(refusal.kind)
                )
                element.text = visible(f"{refusal.kind} at {place}: {bounded(refusal.message)}")
    stages = sorted({result.stage for model in models for result in model.results}, key=STAGES.index)
    for stage in stages:
        suite_of(stage)
    for model in models:
        by_stage: dict[str, tuple[list[Finding], list[Finding]]] = {}
        for finding in model.findings:
            errors, warnings = by_stage.setdefault(finding.stage, ([], []))
            (warnings if finding.severity == "warning" else errors).append(finding)
        name = visible(model.name) or "model"
        for result in model.results:
            suite, counts, seconds = suite_of(result.stage)
            suite_name = f"{TOOL_NAME}.{result.stage}"
            case = ET.SubElement(suite, "testcase", classname=suite_name, name=name, time=_seconds(result.seconds))
            errors, warnings = by_stage.get(result.stage, ([], []))
            counts["tests"] += 1
            reason = visible(bounded(result.reason)) or "no reason given"
            if result.status == "incomplete":
                counts["errors"] += 1
                element = ET.SubElement(case, "error", message=f"the {result.stage} check did not finish: {reason}", type="incomplete")
                element.text = reason
            elif result.status == "skipped":
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=reason)
            elif result.status == "fail":
                counts["failures"] += 1
                first = errors[0].code if errors else "fail"
                element = ET.SubElement(
                    case,
                    "failure",
                    message=f"{result.errors} errors, {result.warnings} warnings in the {result.stage} check",
                    type=visible(first),
                )
                element.text = _listing(errors, result.errors)
            if warnings or result.warnings:
                out = ET.SubElement(case, "system-out")
                out.text = "warnings:\n" + _listing(warnings, max(result.warnings, len(warnings)))
            seconds[0] += max(result.seconds, 0.0)
    for suite, counts, seconds in suites.values():
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("time", _seconds(seconds[0]))
        total_time += seconds[0]
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", _seconds(total_time))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
