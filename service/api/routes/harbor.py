"""Harbor's Scanner Adapter API v1.2, under `/harbor/api/v1` (on with `ONNX_SERVICE_HARBOR_TOKEN` or `--harbor-token-file`).

- `GET /harbor/api/v1/metadata`: the scanner and its capabilities (`service.registry.harbor_report.metadata`);
- `POST /harbor/api/v1/scan`: Harbor's ScanRequest (at most 64 KiB), parsed and
  checked by `service.registry.harbor_scanner.scan_request`; 202 with
  `{"id": ...}`, the scan running in the background;
- `GET /harbor/api/v1/scan/{id}/report`: 302 with `Refresh-After` (seconds)
  while the scan runs, then 200 with the report, under the media type the
  Accept header names of the two the scanner produces (the Harbor vulnerability
  report's; 501 for another), or 500 with the error of a scan that could not
  end; 404 for an id no scan has (or one expired).

Every route needs `Authorization: Bearer TOKEN`, the token Harbor is
registered with, checked before any body is read (401 otherwise); without a
token configured the routes answer 404. Every error is the spec's
ErrorResponse (`{"error": {"message": ...}}`, `ERROR_TYPE`), never a problem:
Harbor reads that format. The routes are left out of the service's own
OpenAPI document: their contract is Harbor's (testdata/harbor).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from service.api.dependencies import ImportsDep
from service.api.request_body import MAX_JSON_BODY, small_body
from service.registry.harbor_report import (
    ERROR_TYPE,
    METADATA_TYPE,
    METADATA_TYPES,
    REPORT_TYPES,
    SCAN_RESPONSE_TYPE,
    VULNERABILITY_REPORT_TYPE,
    metadata,
)
from service.registry.harbor_scanner import BadScanRequest, HarborScanner, scan_request

router = APIRouter(prefix="/harbor/api/v1", tags=["harbor"], include_in_schema=False)
REFRESH_AFTER = 5  # seconds Harbor is asked to wait before it asks for a running scan's report again
MAX_SCAN_ID = 100


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message}}, status_code=status, media_type=ERROR_TYPE)


def _refused(request: Request) -> JSONResponse | None:
    """The answer to a request the scanner does not take (off: 404; without its token: 401); None to go on."""
    scanner: HarborScanner | None = getattr(request.app.state, "harbor_scanner", None)
    if scanner is None:
        return error(404, "the Harbor scanner is off (ONNX_SERVICE_HARBOR_TOKEN or --harbor-token-file)")
    if not scanner.authorize(request.headers.get("authorization")):
        answer = error(401, "the request lacks Authorization: Bearer TOKEN with the token Harbor is registered with")
        answer.headers["WWW-Authenticate"] = 'Bearer realm="harbor-scanner"'
        return answer
    return None


def _scanner(request: Request) -> HarborScanner:
    scanner: HarborScanner = request.app.state.harbor_scanner
    return scanner


def _accepted(accept: str, offered: tuple[str, ...]) -> str | None:
    """The first of `offered` the Accept header names (the first offered for none, or */*); None if it names none of them."""
    asked = [part.strip() for part in accept.split(",") if part.strip()]
    if not asked or any(part.split(";")[0].strip() in ("*/*", "application/*") for part in asked):
        return offered[0]
    normal = [" ".join(part.replace(" ", "").replace(";", "; ").split()).lower() for part in asked]
    return next((media_type for media_type in offered if media_type.lower() in normal), None)


@router.get("/metadata")
async def harbor_metadata(request: Request, parts: ImportsDep) -> Response:
    if (refused := _refused(request)) is not None:
        return refused
    media_type = _accepted(request.headers.get("accept", ""), (METADATA_TYPE, *METADATA_TYPES)) or METADATA_TYPE
    return JSONResponse(metadata(parts.settings.oci_checks), media_type=media_type)


@router.post("/scan")
async def harbor_scan(request: Request, parts: ImportsDep) -> Response:
    if (refused := _refused(request)) is not None:
        return refused
    if (body := await small_body(request, parts.settings.body_timeout)) is None:
        return error(400, f"a scan request is at most {MAX_JSON_BODY} bytes")
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        return error(400, "the body is not JSON")
    try:
        asked = scan_request(parsed, parts.settings.oci_registry)
    except BadScanRequest as refusal:
        return error(refusal.status, str(refusal))
    scan_id = await _scanner(request).accept(asked)
    return JSONResponse({"id": scan_id}, status_code=202, media_type=SCAN_RESPONSE_TYPE)


@router.get("/scan/{scan_id}/report")
async def harbor_report(scan_id: str, request: Request, parts: ImportsDep) -> Response:
    if (refused := _refused(request)) is not None:
        return refused
    media_type = _accepted(request.headers.get("accept", ""), REPORT_TYPES)
    if media_type is None:
        return error(501, f"the scanner produces {' and '.join(REPORT_TYPES)} only")
    found = await _scanner(request).report(scan_id) if len(scan_id) <= MAX_SCAN_ID else None
    if found is None:
        return error(404, f"no scan {scan_id[:MAX_SCAN_ID]!r} (never asked for, or expired)")
    if found.state == "running" and not found.lapsed:
        return Response(status_code=302, headers={"Refresh-After": str(REFRESH_AFTER)})
    if found.state == "running":
        return error(500, "the scan's process stopped before the scan ended: scan again")
    if found.state == "error":
        return error(500, f"the scan could not end: {found.body}")
    return Response(found.body.encode(), media_type=media_type or VULNERABILITY_REPORT_TYPE)
