"""A validation's outcome as MLflow tags: each file's `FileVerdict`, the version's `version_tags`, and `not_imported`.

A version's ONNX files are each imported and checked (`service.registry.version_source`);
each gets a `FileVerdict`: pass, fail or incomplete (the import's fail-closed
verdict for the hook's tenant), or refused (the service would not fetch or
import it: the reason says why). The version's `onnx_import.verdict` is the
worst of its files' (`WORST_FIRST`: refused, incomplete, fail, pass), or
refused or incomplete for the whole version when its files could not be
listed or fetched (`not_imported`). Its tags, when its files were listed:

- `onnx_import.model_id`: the first file's id that was imported (files in
  name order; the only file's, for one);
- `onnx_import.report`: a link to the SARIF report of every imported file
  (one run per file) that opens without an API key
  (`service.imports.report_links`: `/links/{token}`, under `--public-url`
  when set);
- `onnx_import.files`: JSON, each file's `file`, `verdict` and `model_id`
  ("" when not imported), within MLflow's tag value limit (`MAX_TAG`: files
  past it are counted in a last entry, `{"more": N}`);
- `onnx_import.checks` as `stage=status,...`, and `onnx_import.reason`
  whenever the verdict is not pass; for several files, each file's, as
  `FILE: ...` joined by `; ` (the reason: the files that did not pass);
- `onnx_import.bindings`: JSON, each file's smoke bindings (its summary's
  `checks.smoke.bindings`: one object per smoke run, a dimension's key to its
  value), by file name; only when a summary has them.

An imported version is compared with the one that holds the alias
(`compared`): `onnx_import.compared_with` (that version), `onnx_import.diff`
(what changed, in counts, or why it was not compared) and
`onnx_import.diff_url` (a link to the comparison, as the report's): the
first file's models. `onnx_import.alias` is written with the alias
(`service.registry.alias`), `onnx_import.attestation` with the version's
attestations (`service.registry.version_attestations`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from service.errors import bounded

PREFIX = "onnx_import."
VERDICT, MODEL_ID, REPORT, CHECKS, REASON = (PREFIX + key for key in ("verdict", "model_id", "report", "checks", "reason"))
FILES, BINDINGS, ALIAS, ATTESTATION = (PREFIX + key for key in ("files", "bindings", "alias", "attestation"))
COMPARED_WITH, DIFF, DIFF_URL = (PREFIX + key for key in ("compared_with", "diff", "diff_url"))
MAX_REASON = 1000  # characters of the reason tag (of each file's part of it, for several)
MAX_TAG = 5000  # characters of a tag's value MLflow takes
MAX_FILE_NAME = 200  # characters of a file's name in the tags
WORST_FIRST = ("refused", "incomplete", "fail", "pass")  # a version's verdict is its worst file's


@dataclass(frozen=True, slots=True)
class FileVerdict:
    """One ONNX file of a version, checked (or not: no `model_id`)."""

    file: str
    verdict: str
    model_id: str = ""
    checks: str = ""  # stage=status,...
    reason: str = ""  # why it did not pass ("" for a pass)
    bindings: list[Any] | None = None  # the smoke runs' bindings (None: the summary has none)


def worst(verdicts: list[str]) -> str:
    """The worst of the verdicts (`WORST_FIRST`); an unknown one counts as incomplete."""
    ranks = [WORST_FIRST.index(verdict) if verdict in WORST_FIRST else 1 for verdict in verdicts]
    return WORST_FIRST[min(ranks)] if ranks else "refused"


def _fail_reason(summary: dict[str, Any]) -> str:
    """The failing stages, each with its first error."""
    checks: dict[str, Any] = summary.get("checks", {})
    items: list[dict[str, Any]] = summary.get("diagnostics", {}).get("items", [])
    parts = []
    for stage, entry in checks.items():
        status = entry.get("status")
        if status == "fail":
            first = next((item for item in items if item.get("stage") == stage and item.get("severity") == "error"), None)
            said = f": {first.get('code', '')} {first.get('message', '')}".rstrip() if first else ""
            parts.append(f"{stage} failed{said}")
        elif status in ("incomplete", "skipped"):
            parts.append(f"{stage} {status}: {entry.get('reason', '')}".rstrip(": "))
    return "; ".join(parts) or f"verdict {summary.get('verdict')}"


def file_imported(file: str, summary_bytes: bytes, model_id: str) -> FileVerdict:
    """A file's verdict from its import's summary, as the hook's tenant sees it."""
    summary = json.loads(summary_bytes)
    verdict = str(summary.get("verdict", "incomplete"))
    checks = summary.get("checks", {})
    bindings = checks.get("smoke", {}).get("bindings")
    return FileVerdict(
        file, verdict, model_id,
        checks=",".join(f"{stage}={entry.get('status')}" for stage, entry in checks.items()),
        reason="" if verdict == "pass" else bounded(_fail_reason(summary), MAX_REASON),
        bindings=bindings if isinstance(bindings, list) else None,
    )  # fmt: skip


def file_not_imported(file: str, verdict: str, reason: str) -> FileVerdict:
    """A file refused, or whose import could not end (incomplete)."""
    return FileVerdict(file, verdict, reason=bounded(reason, MAX_REASON))


def _json_within(entries: list[tuple[str, Any]], as_list: bool) -> str:
    """JSON of the entries (a list of their values, or an object by their keys), within
    MAX_TAG: the entries past it are dropped and counted (`{"more": N}`, or `"more": N`)."""
    for kept in range(len(entries), -1, -1):
        dropped = len(entries) - kept
        if as_list:
            shown: Any = [value for _, value in entries[:kept]] + ([{"more": dropped}] if dropped else [])
        else:
            shown = dict(entries[:kept]) | ({"more": dropped} if dropped else {})
        text = json.dumps(shown, separators=(",", ":"))
        if len(text) <= MAX_TAG:
            return text
    raise AssertionError("an empty list fits")


def version_tags(files: list[FileVerdict], report_link: Callable[[list[str]], str]) -> tuple[str, dict[str, str]]:
    """(verdict, tags) of a version whose files are `files` (in name order);
    `report_link` makes the link that opens the SARIF report of the model ids it is given."""
    several = len(files) > 1
    verdict = worst([checked.verdict for checked in files])
    tags = {VERDICT: verdict}
    imported = [checked for checked in files if checked.model_id]
    if imported:
        tags[MODEL_ID] = imported[0].model_id
        tags[REPORT] = report_link([checked.model_id for checked in imported])
    tags[FILES] = _json_within(
        [(checked.file, {"file": checked.file[:MAX_FILE_NAME], "verdict": checked.verdict, "model_id": checked.model_id})
         for checked in files], as_list=True,
    )  # fmt: skip
    if several:
        each = [f"{checked.file[:MAX_FILE_NAME]}: {checked.checks or checked.verdict}" for checked in files]
        tags[CHECKS] = bounded("; ".join(each), MAX_TAG)
    elif files[0].checks:
        tags[CHECKS] = files[0].checks
    if verdict != "pass":
        failing = [checked for checked in files if checked.verdict != "pass"]
        said = "; ".join(f"{checked.file[:MAX_FILE_NAME]}: {checked.reason}" for checked in failing) if several else failing[0].reason
        tags[REASON] = bounded(said, MAX_TAG if several else MAX_REASON)
    bound = [(checked.file[:MAX_FILE_NAME], checked.bindings) for checked in files if checked.bindings is not None]
    if bound:
        tags[BINDINGS] = _json_within(bound, as_list=False)
    return verdict, tags


def not_imported(verdict: str, reason: str) -> dict[str, str]:
    """The tags of a version refused, or whose validation could not end (incomplete), before its files were listed."""
    return {VERDICT: verdict, REASON: bounded(reason, MAX_REASON)}


def diff_said(head: dict[str, Any]) -> str:
    """A diff's head in one line: "identical", or each kind of change counted."""
    if head.get("identical"):
        return "identical"
    counts = head["counts"]
    said = [f"{kind}s +{counts[kind]['added']} -{counts[kind]['removed']} ~{counts[kind]['changed']}" for kind in ("node", "initializer")]
    said += [f"{len(head[name])} {name} changed" for name in ("opsets", "inputs", "outputs") if head[name]]
    return "; ".join(said)


def compared(head: dict[str, Any] | None, version: str, diff_link: str = "", why_not: str = "") -> dict[str, str]:
    """The tags of a version compared with `version` (the alias's) by the diff
    `head`, which `diff_link` opens, or not compared (`head` None) for the reason `why_not`."""
    tags = {COMPARED_WITH: version}
    if head is None:
        tags[DIFF] = bounded(f"not compared: {why_not}", MAX_REASON)
    else:
        tags[DIFF] = diff_said(head)
        tags[DIFF_URL] = diff_link
    return tags
