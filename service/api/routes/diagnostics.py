"""Route of the diagnostics resource: every check stage's findings.

`GET /models/{id}/diagnostics` pages through every diagnostic this tenant's
own runs of the check stages found (`service.checks.runs`: at import, or by
`POST /models/{id}/checks`), stage by stage in the order they ran and each
in file order, with its stage, severity, stable code,
message, node, field path and byte offset; `severity=error` or `warning`
and `stage=NAME` keep one kind. One read of the tenant's runs per page (a
holding from before per-tenant runs: one indexed query of the model's
catalogue). `format=sarif` (SARIF 2.1.0) and `format=junit` (JUnit XML) give
the whole report for CI instead (`service.checks.sarif`, `service.checks.junit`),
with each stage's status and the verdict, its findings cut at
MAX_REPORT_FINDINGS (the report says how many more there are). A report
link's SARIF of several models (`sarif_response`, `service.api.routes.links`)
is made here too: one run per model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, Response

from service.access.callers import ReadCaller
from service.api.dependencies import ImportsDep
from service.api.openapi import problem_responses
from service.api.paging import page_of, seq_after
from service.api.routes.models import MAX_PAGE, require_model
from service.api.routes.tensors import catalog_errors, catalog_of
from service.api.schemas import DiagnosticEntry, DiagnosticPage, PageLinks
from service.checks.junit import junit_report
from service.checks.outcome import STAGES, Finding, Stage, results_of
from service.checks.report import ModelChecks
from service.checks.runs import CheckRuns
from service.checks.sarif import sarif_runs
from service.imports.parts import ImportParts

router = APIRouter(tags=["diagnostics"])
MAX_REPORT_FINDINGS = 20_000
SARIF_MEDIA_TYPE = "application/sarif+json"
JUNIT_MEDIA_TYPE = "application/xml"


@router.api_route(
    "/models/{model_id}/diagnostics",
    methods=["GET", "HEAD"],
    response_model=DiagnosticPage,
    summary="The check stages' findings, each with its place, paged; or the whole report as SARIF 2.1.0 or JUnit XML",
    responses={
        200: {"content": {SARIF_MEDIA_TYPE: {}, JUNIT_MEDIA_TYPE: {}}, "description": "a page (json), or the report"},
        **problem_responses(400, 401, 403, 404, 422),
    },
)
def list_diagnostics(
    model_id: str,
    parts: ImportsDep,
    caller: ReadCaller,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[str | None, Query(max_length=1024)] = None,
    severity: Literal["error", "warning"] | None = None,
    stage: Stage | None = None,
    format: Literal["json", "sarif", "junit"] = "json",
) -> Response | DiagnosticPage:
    # a plain def: FastAPI runs it in a worker thread (SQLite queries)
    require_model(parts.store, caller.tenant, model_id)
    if format != "json":
        return _report(parts, caller.tenant, model_id, format)
    after = seq_after("diagnostics", cursor)
    runs = CheckRuns.from_bytes(parts.store.checks(caller.tenant, model_id))
    if runs is not None:
        listed = runs.findings_of(severity, stage)
        rows = [{"seq": seq, **finding} for seq, finding in enumerate(listed) if seq > after][: limit + 1]
    else:  # a holding from before per-tenant runs: the findings stored with the content
        with catalog_errors():
            rows = catalog_of(parts, model_id, caller.tenant).diagnostics(after, limit + 1, severity, stage)
    page = page_of(
        rows,
        limit,
        "diagnostics",
        lambda row: (int(str(row["seq"])),),
        f"/models/{model_id}/diagnostics",
        severity=severity or "",
        stage=stage or "",
    )
    items = [DiagnosticEntry.model_validate({k: v for k, v in row.items() if k != "seq"}) for row in page.items]
    return DiagnosticPage(items=items, next_cursor=page.next_cursor, links=PageLinks(next=page.next_link))


def _report(parts: ImportParts, tenant: str, model_id: str, format: Literal["sarif", "junit"]) -> Response:
    """The model's whole check report, for CI."""
    checks = _model_checks(parts, tenant, model_id)
    if format == "junit":
        return Response(junit_report(checks.name, checks.results, checks.findings), media_type=JUNIT_MEDIA_TYPE)
    return JSONResponse(sarif_runs([checks]), media_type=SARIF_MEDIA_TYPE)


def sarif_response(parts: ImportParts, tenant: str, model_ids: Sequence[str]) -> Response:
    """The SARIF report of the tenant's models, one run per model (one model: the
    report `format=sarif` gives); NotFound for a model the tenant does not hold."""
    for model_id in model_ids:
        require_model(parts.store, tenant, model_id)
    return JSONResponse(sarif_runs([_model_checks(parts, tenant, model_id) for model_id in model_ids]), media_type=SARIF_MEDIA_TYPE)


def _model_checks(parts: ImportParts, tenant: str, model_id: str) -> ModelChecks:
    """The model's check runs as the tenant sees them, named as it named the model."""
    view = parts.store.summary_for(tenant, model_id)  # NotFound if it went meanwhile
    summary = json.loads(view.summary)
    name = view.holding.input if view.holding is not None else str(summary.get("input", ""))
    runs = CheckRuns.from_bytes(view.runs)
    if runs is not None:
        findings = [Finding.from_dict(item) for item in runs.findings[:MAX_REPORT_FINDINGS]]
        results = runs.results()
    else:  # a holding from before per-tenant runs: what is stored with the content
        findings, results = _stored_findings(parts, tenant, model_id), results_of(summary)
    sha256 = (summary.get("model_file") or {}).get("sha256")
    return ModelChecks(name, tuple(results), tuple(findings), model_id=model_id, sha256=sha256)


def _stored_findings(parts: ImportParts, tenant: str, model_id: str) -> list[Finding]:
    findings: list[Finding] = []
    catalog = catalog_of(parts, model_id, tenant)
    after = -1
    with catalog_errors():
        while len(findings) < MAX_REPORT_FINDINGS:
            rows = catalog.diagnostics(after, min(MAX_PAGE, MAX_REPORT_FINDINGS - len(findings)), None, None)
            findings += [Finding.from_dict(row) for row in rows if row.get("stage", "schema") in STAGES]
            if not rows:
                break
            after = int(str(rows[-1]["seq"]))
    return findings
