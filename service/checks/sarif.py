"""The check results as a SARIF 2.1.0 log, for CI and code-scanning tools.

Owns `sarif_report` (one run of the tool `onnx-import`: a rule per distinct
code, a result per listed finding placed by byte offset and field path, the
model as the one artifact, and an invocation that fails closed: any stage
that did not finish makes `executionSuccessful` false, with an error
notification giving its reason) and `visible`, which both reports use to
render text taken from the model (names, messages) so that control and
bidirectional-override characters show as escapes instead of acting on the
reader's screen.

Choices the specification leaves open, made here:

- The model is a binary artifact: a finding's region is `byteOffset` alone
  (byteLength absent means 0, an insertion point at the byte offset of the
  field's key, §3.30.12); no text region is made up.
- `artifactLocation.uri` is a relative reference: the model's name split on
  `/`, each segment percent-encoded (`:` and `\\` included, so a name never
  reads as a scheme or a Windows path), empty and `.` segments dropped, `..`
  resolved lexically and dropped where it would climb above the base.
- The logical location's `fullyQualifiedName` is the field path
  (`ModelProto.graph.node[17]`), its `name` the node's name when it has one,
  made `visible` (viewers show it); the result's `properties.node_name`,
  `op_type` and `domain` keep the names exactly, for tools that match them.
- A skipped stage (refused on purpose) is a `warning` notification, an
  incomplete one an `error` notification (§3.20.21: the run failed); a stage
  that counted more findings than it listed gets a `note`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from importlib import metadata
from typing import Final
from urllib.parse import quote

from importer.diagnostics import bounded
from service.checks.outcome import Finding, StageResult, verdict

SARIF_SCHEMA: Final = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SARIF_VERSION: Final = "2.1.0"
TOOL_NAME: Final = "onnx-import"
DISTRIBUTION: Final = "onnx-import-service"


def _tool_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"


TOOL_VERSION: Final = _tool_version()

# C0 and C1 controls (tab and newline kept), bidirectional marks, embeddings,
# overrides and isolates, line and paragraph separators, lone surrogates and
# the two noncharacters XML 1.0 forbids.
_HIDDEN: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every character that could hide or reorder what a reader
    sees, or that XML 1.0 forbids, written as a `\\xNN` or `\\uNNNN` escape."""
    return _HIDDEN.sub(_escape, text)


_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _clean(text: str) -> str:
    """A name kept as it is, but for lone surrogates (not Unicode: a strict
    JSON reader refuses them), which become U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def artifact_uri(model_name: str) -> str:
    """The model's name as a relative URI reference (see the module's notes)."""
    segments: list[str] = []
    for segment in model_name.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":  # resolved here: `%2E%2E` would be the same URI (RFC 3986, 2.3)
            if segments:
                segments.pop()
            continue
        try:
            segments.append(quote(segment, safe="", errors="surrogateescape"))
        except UnicodeEncodeError:
            segments.append(quote(segment, safe="", errors="replace"))
    return "/".join(segments) or "model"


def _rule(finding: Finding) -> dict[str, object]:
    return {
        "id": finding.code,
        "name": "".join(part.capitalize() for part in finding.code.split("-")) or finding.code,
        "shortDescription": {"text": f"{finding.stage} check: {finding.code.replace('-', ' ')}"},
        "properties": {"stage": finding.stage},
    }


_NOTIFICATIONS: Final[dict[str, str]] = {
    "stage-incomplete": "A check stage did not finish (a crash, a limit, a missing dependency): its results are missing.",
    "stage-skipped": "A check stage was not run, for the reason given.",
    "findings-not-listed": "A check stage counted more findings than it lists.",
}


def _check(result: StageResult) -> dict[str, object]:
    """The summary's `checks.NAME`, its reason made visible."""
    entry = result.as_dict()
    if isinstance(entry.get("reason"), str):
        entry["reason"] = visible(str(entry["reason"]))
    return entry


def sarif_report(
    model_name: str,
    results: Sequence[StageResult],
    findings: Iterable[Finding],
    *,
    model_id: str | None = None,
    model_sha256: str | None = None,
    tool_version: str = TOOL_VERSION,
) -> dict[str, object]:
    """The SARIF log (a JSON-ready dict) of one model's check `results` and
    their `findings` (every stage's, in any order; listed in that order)."""
    uri = artifact_uri(model_name)
    rules: list[dict[str, object]] = []
    rule_index: dict[str, int] = {}
    sarif_results: list[dict[str, object]] = []
    listed: dict[str, int] = {}
    for finding in findings:
        index = rule_index.get(finding.code)
        if index is None:
            index = rule_index[finding.code] = len(rules)
            rules.append(_rule(finding))
        listed[finding.stage] = listed.get(finding.stage, 0) + 1
        logical: dict[str, object] = {"fullyQualifiedName": finding.field_path, "kind": "element"}
        node_name = None if finding.node_name is None else _clean(finding.node_name)
        if node_name:
            logical["name"] = visible(node_name)
        sarif_results.append(
            {
                "ruleId": finding.code,
                "ruleIndex": index,
                "level": "warning" if finding.severity == "warning" else "error",
                "message": {"text": visible(bounded(finding.message)) or finding.code},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": {"uri": uri, "index": 0},
                            "region": {"byteOffset": max(finding.offset, 0)},
                        },
                        "logicalLocations": [logical],
                    }
                ],
                "properties": {
                    "stage": finding.stage,
                    "node_name": node_name,
                    "op_type": None if finding.op_type is None else _clean(finding.op_type),
                    "domain": None if finding.domain is None else _clean(finding.domain),
                },
            }
        )

    notifications: list[dict[str, object]] = []
    used: set[str] = set()

    def notify(descriptor: str, level: str, text: str, result: StageResult) -> None:
        used.add(descriptor)
        notifications.append(
            {
                "descriptor": {"id": descriptor},
                "level": level,
                "message": {"text": text},
                "properties": {"stage": result.stage, "status": result.status},
            }
        )

    for result in results:
        reason = visible(bounded(result.reason)) or "no reason given"
        if result.status == "incomplete":
            notify("stage-incomplete", "error", f"The {result.stage} check did not finish: {reason}", result)
        elif result.status == "skipped":
            notify("stage-skipped", "warning", f"The {result.stage} check was skipped: {reason}", result)
        counted = result.errors + result.warnings
        if counted > listed.get(result.stage, 0):
            notify(
                "findings-not-listed",
                "note",
                f"The {result.stage} check found {counted} problems ({result.errors} errors, {result.warnings} warnings);"
                f" {listed.get(result.stage, 0)} are listed.",
                result,
            )

    artifact: dict[str, object] = {"location": {"uri": uri}, "roles": ["analysisTarget"]}
    if model_sha256:
        artifact["hashes"] = {"sha-256": model_sha256.lower()}
    driver: dict[str, object] = {"name": TOOL_NAME, "version": tool_version, "rules": rules}
    if used:
        driver["notifications"] = [{"id": name, "shortDescription": {"text": _NOTIFICATIONS[name]}} for name in sorted(used)]
    run_properties: dict[str, object] = {
        "verdict": verdict(results),
        "checks": {result.stage: _check(result) for result in results},
    }
    if model_id is not None:
        run_properties["model_id"] = model_id
    invocation: dict[str, object] = {"executionSuccessful": all(result.status != "incomplete" for result in results)}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {"driver": driver},
                "invocations": [invocation],
                "artifacts": [artifact],
                "results": sarif_results,
                "properties": run_properties,
            }
        ],
    }
