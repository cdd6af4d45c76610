"""A validation's outcome as MLflow tags: `imported`, `not_imported`, `compared`.

`onnx_import.verdict` is pass, fail or incomplete (the import's fail-closed
verdict for the hook's tenant), or refused (the service would not fetch or
import the version: the reason says why). `onnx_import.model_id` and
`onnx_import.report` (a link to the SARIF report that opens without an API
key, `service.imports.report_links`: `/links/{token}`, under `--public-url`
when set) when the model was imported, `onnx_import.checks` as
`stage=status,...`, and `onnx_import.reason` whenever the verdict is not
pass. An imported version is compared with the one that holds the alias
(`compared`): `onnx_import.compared_with` (that version),
`onnx_import.diff` (what changed, in counts, or why it was not compared)
and `onnx_import.diff_url` (a link to the comparison, as the report's).
"""

from __future__ import annotations

import json
from typing import Any

from service.errors import bounded

PREFIX = "onnx_import."
VERDICT, MODEL_ID, REPORT, CHECKS, REASON = (PREFIX + key for key in ("verdict", "model_id", "report", "checks", "reason"))
COMPARED_WITH, DIFF, DIFF_URL = (PREFIX + key for key in ("compared_with", "diff", "diff_url"))
MAX_REASON = 1000  # characters of the reason tag


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


def imported(summary_bytes: bytes, model_id: str, report_link: str) -> tuple[str, dict[str, str]]:
    """(verdict, tags) of an import's summary as the hook's tenant sees it; `report_link` opens its SARIF report."""
    summary = json.loads(summary_bytes)
    verdict = str(summary.get("verdict", "incomplete"))
    checks = summary.get("checks", {})
    tags = {
        VERDICT: verdict,
        MODEL_ID: model_id,
        REPORT: report_link,
        CHECKS: ",".join(f"{stage}={entry.get('status')}" for stage, entry in checks.items()),
    }
    if verdict != "pass":
        tags[REASON] = bounded(_fail_reason(summary), MAX_REASON)
    return verdict, tags


def not_imported(verdict: str, reason: str) -> dict[str, str]:
    """The tags of a version refused, or whose validation could not end (incomplete)."""
    return {VERDICT: verdict, REASON: bounded(reason, MAX_REASON)}


def diff_said(head: dict[str, Any]) -> str:
    """A diff's head in one line: "identical", or each kind of change counted."""
    if head.get("identical"):
        return "identical"
    counts = head["counts"]
    said = [
        f"{kind}s +{counts[kind]['added']} -{counts[kind]['removed']} ~{counts[kind]['changed']}" for kind in ("node", "initializer")
    ]
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
