"""The check results as a SARIF 2.1.0 log, for CI and code-scanning tools.

Owns `sarif_log`, the one function that makes the SARIF of the command line
and of the service (`sarif_report` is its one-model form): one run of the
tool `onnx-import` over any number of models (`service.checks.report`), an
artifact per model, a rule per distinct code with its description and help
from `service.checks.rules` (and `security-severity` for security codes), a
result per listed finding placed by byte offset and field path with
`partialFingerprints`, an `error` result of the rule `model-refused` at the
refused byte for a model the importer refused, and an invocation that fails
closed: any stage that did not finish makes `executionSuccessful` false, with
an error notification giving its reason. `sarif_runs` is the log of several
models as one run each (the service's report links to several models). GitHub code scanning's rules (the
SARIF Multitool's `Gh;Sarif`) find no error in it. Also `visible`, which
both reports use to render text taken from the model (names, messages) so
that control and bidirectional-override characters show as escapes instead
of acting on the reader's screen.

Choices the specification leaves open, made here:

- The model is a binary artifact: a finding's region is `byteOffset` alone
  (byteLength absent means 0, an insertion point at the byte offset of the
  field's key, §3.30.12); no text region is made up.
- `artifactLocation.uri` is a relative reference: the model's name split on
  `/`, each segment percent-encoded (`:` and `\\` included, so a name never
  reads as a scheme or a Windows path), empty and `.` segments dropped, `..`
  resolved lexically and dropped where it would climb above the base.
  It is relative to `SRCROOT` (`uriBaseId`), which the command line gives
  as its working directory (`originalUriBaseIds`) and the service leaves to
  the reader (a checkout's root, for code scanning); a caller may give an
  absolute `file:` URI instead (the command line, for a path outside its
  working directory), which has no base.
- `partialFingerprints.onnxImportFinding/v1` hashes the code, field path,
  node name and stage, not the offset or message: an alert stays the same
  alert when unrelated bytes move or a message's numbers change.
- Stage times go in the invocation's `properties.stage_seconds`, per artifact;
  the verdicts (the worst, and each model's) in the run's `properties`.
- The dimensions the smoke runs were made at go in the invocation's
  `properties.smoke_bindings`, per artifact whose smoke stage bound any:
  `bindings` (one map per run, in run order), `binding_sources` (request,
  model, registry or default) and `text` (`batch=1,2`, `bindings_text`);
  the run's `properties.checks.smoke` carries the first two as well, and a
  smoke finding's message names the binding it was found at.
- The logical location's `fullyQualifiedName` is the field path
  (`ModelProto.graph.node[17]`), its `name` the node's name when it has one,
  made `visible` (viewers show it); the result's `properties.node_name`,
  `op_type` and `domain` keep the names exactly, for tools that match them.
- A skipped stage (refused on purpose) is a `warning` notification, an
  incomplete one an `error` notification (§3.20.21: the run failed); a stage
  that counted more findings than it listed gets a `note`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from importlib import metadata
from typing import Final, cast
from urllib.parse import quote

from importer.diagnostics import bounded
from service.checks.bindings_text import bindings_text
from service.checks.outcome import Finding, StageResult
from service.checks.report import ModelChecks, worst
from service.checks.rules import MODEL_REFUSED, RULES

SARIF_SCHEMA: Final = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SARIF_VERSION: Final = "2.1.0"
TOOL_NAME: Final = "onnx-import"
DISTRIBUTION: Final = "onnx-import-service"
INFORMATION_URI: Final = "https://onnx-import.example/docs/checks.md"  # the project's address, as its problem types use
DOCS_URI: Final = "https://onnx-import.example/docs/"
BASE_ID: Final = "SRCROOT"  # what the artifacts' relative URIs are relative to (a checkout's root, the working directory)
FINGERPRINT: Final = "onnxImportFinding/v1"  # partialFingerprints' key: code, field path, node name and stage


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


def _plain(markdown: str) -> str:
    """A rule's markdown as plain text: code spans and links unmarked."""
    return re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown).replace("`", "")


def _rule(code: str, stage: str) -> dict[str, object]:
    """The reportingDescriptor of `code` (its row of `RULES`; a code missing
    there, which a test forbids, still gets a description and help)."""
    known = RULES.get(code)
    meaning = known.meaning if known else f"A finding of the {stage} check (see docs/checks.md)."
    action = known.action if known else "Read the finding's message."
    severity = known.severity if known else "error"
    properties: dict[str, object] = {"stage": known.stage if known else stage, "tags": ["onnx", known.stage if known else stage]}
    if known is not None and known.security_severity is not None:
        properties["tags"] = ["onnx", "security"]
        properties["security-severity"] = known.security_severity
    document = "security-findings.md" if properties["stage"] == "security" else "checks.md"
    return {
        "id": code,
        "name": "".join(part.capitalize() for part in code.split("-")) or code,
        "shortDescription": {"text": f"{properties['stage']} check: {code.replace('-', ' ')}"},
        "fullDescription": {"text": _plain(meaning), "markdown": meaning},
        "help": {"text": _plain(action), "markdown": action},
        "helpUri": f"{DOCS_URI}{document}#codes",
        "defaultConfiguration": {"level": "warning" if severity == "warning" else "error"},
        "properties": properties,
    }


_NOTIFICATIONS: Final[dict[str, str]] = {
    "stage-incomplete": "A check stage did not finish (a crash, a limit, a missing dependency): its results are missing.",
    "stage-skipped": "A check stage was not run, for the reason given.",
    "findings-not-listed": "A check stage counted more findings than it lists.",
}
_NOTIFICATION_HELP: Final[dict[str, str]] = {
    "stage-incomplete": "The verdict is incomplete: read the reason, raise the limit or install what is missing, and run again.",
    "stage-skipped": "The verdict is incomplete unless another stage failed: the reason says what the stage refused to run.",
    "findings-not-listed": "The report lists the first findings of the stage only; fix those and run again to see the rest.",
}


def _check(result: StageResult) -> dict[str, object]:
    """The summary's `checks.NAME`, its reason made visible."""
    entry = result.as_dict()
    if isinstance(entry.get("reason"), str):
        entry["reason"] = visible(str(entry["reason"]))
    return entry


def _bindings_entry(artifact_index: int, result: StageResult) -> dict[str, object]:
    """The dimensions a stage's runs were made at (the smoke stage's), for the invocation's properties."""
    bindings = [{_clean(key): value for key, value in run.items()} for run in result.bindings]
    sources = {_clean(key): source for key, source in result.binding_sources.items()}
    text = visible(bounded(bindings_text(result.bindings)))
    return {"artifactIndex": artifact_index, "stage": result.stage, "bindings": bindings, "binding_sources": sources, "text": text}


def fingerprint(*parts: str) -> str:
    """A stable key of a finding across runs and offsets: the same code at the
    same field of the same node keeps it when unrelated bytes move."""
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _place(location: dict[str, object], offset: int, field_path: str, name: str | None = None) -> dict[str, object]:
    """A result's location: the byte of the field's key in the artifact, and the field path."""
    logical: dict[str, object] = {"fullyQualifiedName": field_path, "kind": "element"}
    if name:
        logical["name"] = visible(name)
    return {
        "physicalLocation": {"artifactLocation": dict(location), "region": {"byteOffset": max(offset, 0)}},
        "logicalLocations": [logical],
    }


def _notification(location: dict[str, object], descriptor: str, level: str, text: str, result: StageResult) -> dict[str, object]:
    return {
        "descriptor": {"id": descriptor},
        "level": level,
        "message": {"text": text},
        "locations": [{"physicalLocation": {"artifactLocation": dict(location)}}],
        "properties": {"stage": result.stage, "status": result.status},
    }


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
    model = ModelChecks(model_name, tuple(results), tuple(findings), model_id=model_id, sha256=model_sha256)
    return sarif_log([model], tool_version=tool_version)


def sarif_log(
    models: Sequence[ModelChecks],
    *,
    base_uri: str | None = None,
    tool_version: str = TOOL_VERSION,
    category: str = TOOL_NAME,
) -> dict[str, object]:
    """The SARIF log of several models' checks: one run, one artifact per
    model, a result per listed finding and per refused model. `base_uri`
    (an absolute `file:` URI ending in `/`) is what the artifacts' relative
    URIs are relative to (`originalUriBaseIds`: the command line's working
    directory); the service knows none and leaves it to the reader."""
    rules: list[dict[str, object]] = []
    rule_index: dict[str, int] = {}
    sarif_results: list[dict[str, object]] = []
    artifacts: list[dict[str, object]] = []
    notifications: list[dict[str, object]] = []
    used: set[str] = set()
    described: list[dict[str, object]] = []
    timings: list[dict[str, object]] = []
    smoke_bindings: list[dict[str, object]] = []

    def rule_of(code: str, stage: str) -> int:
        index = rule_index.get(code)
        if index is None:
            index = rule_index[code] = len(rules)
            rules.append(_rule(code, stage))
        return index

    for artifact_index, model in enumerate(models):
        uri = model.uri if model.uri is not None else artifact_uri(model.name)
        location: dict[str, object] = {"uri": uri, "index": artifact_index}
        if ":" not in uri.split("/", 1)[0]:  # relative: to the working directory, or the repository's root
            location["uriBaseId"] = BASE_ID
        artifact: dict[str, object] = {"location": {key: value for key, value in location.items() if key != "index"}}
        artifact["roles"] = ["analysisTarget"]
        if model.sha256:
            artifact["hashes"] = {"sha-256": model.sha256.lower()}
        artifacts.append(artifact)

        if model.refusal is not None:
            refusal = model.refusal
            field_path = refusal.field_path or "ModelProto"
            message = visible(bounded(f"{refusal.kind}: {refusal.message}")) or refusal.kind
            sarif_results.append(
                {
                    "ruleId": MODEL_REFUSED,
                    "ruleIndex": rule_of(MODEL_REFUSED, "import"),
                    "level": "error",
                    "message": {"text": message},
                    "locations": [_place(location, refusal.offset or 0, field_path)],
                    "partialFingerprints": {FINGERPRINT: fingerprint(MODEL_REFUSED, _clean(refusal.kind), _clean(field_path))},
                    "properties": {"kind": _clean(refusal.kind), "field_path": _clean(field_path), "offset": refusal.offset},
                }
            )

        listed: dict[str, int] = {}
        for finding in model.findings:
            listed[finding.stage] = listed.get(finding.stage, 0) + 1
            node_name = None if finding.node_name is None else _clean(finding.node_name)
            sarif_results.append(
                {
                    "ruleId": finding.code,
                    "ruleIndex": rule_of(finding.code, finding.stage),
                    "level": "warning" if finding.severity == "warning" else "error",
                    "message": {"text": visible(bounded(finding.message)) or finding.code},
                    "locations": [_place(location, finding.offset, finding.field_path, node_name)],
                    "partialFingerprints": {
                        FINGERPRINT: fingerprint(finding.code, _clean(finding.field_path), node_name or "", finding.stage)
                    },
                    "properties": {
                        "stage": finding.stage,
                        "node_name": node_name,
                        "op_type": None if finding.op_type is None else _clean(finding.op_type),
                        "domain": None if finding.domain is None else _clean(finding.domain),
                    },
                }
            )

        def notify(descriptor: str, level: str, text: str, result: StageResult, location: dict[str, object] = location) -> None:
            used.add(descriptor)
            notifications.append(_notification(location, descriptor, level, text, result))

        for result in model.results:
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

        entry: dict[str, object] = {"artifactIndex": artifact_index, "verdict": model.verdict}
        entry["checks"] = {result.stage: _check(result) for result in model.results}
        if model.refusal is not None:
            entry["refused"] = {key: _clean(value) if isinstance(value, str) else value for key, value in model.refusal.as_dict().items()}
        if model.model_id is not None:
            entry["model_id"] = model.model_id
        described.append(entry)
        timings.append(
            {"artifactIndex": artifact_index, "seconds": {result.stage: round(max(result.seconds, 0.0), 3) for result in model.results}}
        )
        smoke_bindings += [_bindings_entry(artifact_index, result) for result in model.results if result.bindings]

    driver: dict[str, object] = {"name": TOOL_NAME, "version": tool_version, "informationUri": INFORMATION_URI, "rules": rules}
    if used:
        driver["notifications"] = [
            {
                "id": name,
                "shortDescription": {"text": _NOTIFICATIONS[name]},
                "fullDescription": {"text": _NOTIFICATIONS[name]},
                "help": {"text": _NOTIFICATION_HELP[name]},
            }
            for name in sorted(used)
        ]
    run_properties: dict[str, object] = {"verdict": worst(model.verdict for model in models), "models": described}
    if len(described) == 1:  # one model: its checks and id at the top, as before several models
        run_properties["checks"] = described[0]["checks"]
        if "model_id" in described[0]:
            run_properties["model_id"] = described[0]["model_id"]
    invocation: dict[str, object] = {"executionSuccessful": all(model.finished for model in models)}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    invocation_properties: dict[str, object] = {"stage_seconds": timings}
    if smoke_bindings:
        invocation_properties["smoke_bindings"] = smoke_bindings
    invocation["properties"] = invocation_properties
    run: dict[str, object] = {"tool": {"driver": driver}, "automationDetails": {"id": f"{category}/"}}
    if base_uri is not None:
        run["originalUriBaseIds"] = {BASE_ID: {"uri": base_uri}}
    run.update({"invocations": [invocation], "artifacts": artifacts, "results": sarif_results, "properties": run_properties})
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def sarif_runs(models: Sequence[ModelChecks], *, tool_version: str = TOOL_VERSION) -> dict[str, object]:
    """The SARIF log of several models' checks as one run per model, each
    `sarif_log`'s run of that model alone, under a category of its own
    (`onnx-import/NAME`, a number added to a name met before: code scanning
    keeps one run per tool and category). One model: `sarif_log`'s log."""
    if len(models) == 1:
        return sarif_log(models, tool_version=tool_version)
    runs: list[object] = []
    categories: set[str] = set()
    for model in models:
        category = base = f"{TOOL_NAME}/{model.uri if model.uri is not None else artifact_uri(model.name)}"
        number = 1
        while category in categories:
            number += 1
            category = f"{base}-{number}"
        categories.add(category)
        runs += cast(list[object], sarif_log([model], tool_version=tool_version, category=category)["runs"])
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": runs}
