"""A validation's outcome as MLflow tags: `imported`, `not_imported`, `report_url`.

`onnx_import.verdict` is pass, fail or incomplete (the import's fail-closed
verdict for the hook's tenant), or refused (the service would not fetch or
import the version: the reason says why). `onnx_import.model_id` and
`onnx_import.report` (the SARIF report: `/models/{id}/diagnostics?format=sarif`,
under `--public-url` when set) when the model was imported,
`onnx_import.checks` as `stage=status,...`, and `onnx_import.reason` whenever
the verdict is not pass.
"""

from __future__ import annotations

import json
from typing import Any

from service.errors import bounded

PREFIX = "onnx_import."
VERDICT, MODEL_ID, REPORT, CHECKS, REASON = (PREFIX + key for key in ("verdict", "model_id", "report", "checks", "reason"))
MAX_REASON = 1000  # characters of the reason tag


def report_url(public_url: str, model_id: str) -> str:
    return f"{public_url.rstrip('/')}/models/{model_id}/diagnostics?format=sarif"


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


def imported(summary_bytes: bytes, model_id: str, public_url: str) -> tuple[str, dict[str, str]]:
    """(verdict, tags) of an import's summary as the hook's tenant sees it."""
    summary = json.loads(summary_bytes)
    verdict = str(summary.get("verdict", "incomplete"))
    checks = summary.get("checks", {})
    tags = {
        VERDICT: verdict,
        MODEL_ID: model_id,
        REPORT: report_url(public_url, model_id),
        CHECKS: ",".join(f"{stage}={entry.get('status')}" for stage, entry in checks.items()),
    }
    if verdict != "pass":
        tags[REASON] = bounded(_fail_reason(summary), MAX_REASON)
    return verdict, tags


def not_imported(verdict: str, reason: str) -> dict[str, str]:
    """The tags of a version refused, or whose validation could not end (incomplete)."""
    return {VERDICT: verdict, REASON: bounded(reason, MAX_REASON)}
