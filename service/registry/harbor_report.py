"""What the Harbor scanner answers, in the Scanner Adapter API v1.2's shapes: `metadata`, `vulnerability_report`, `ScannedFile`.

Harbor's Scanner Adapter API (goharbor/pluggable-scanner-spec, v1.2; a copy
in testdata/harbor) names its media types (`*_TYPE` below) and its
documents. `metadata` is the ScannerAdapterMetadata: the scanner (name,
vendor, the service's version), one `vulnerability` capability that
consumes OCI image manifests and Docker's v2 (a CNCF ModelPack is an OCI
manifest with the ModelPack artifact type; any other artifact with an
`.onnx` layer is validated too: `service.registry.oci_artifact`) and
produces Harbor's generic vulnerability report in both its media types, and
`properties` (the scanner type; what it takes and the stages it runs: it has no
vulnerability database, so no `vulnerability-database-updated-at`).

`vulnerability_report` is the HarborVulnerabilityReport of one scan: each
`.onnx` file of the artifact (`ScannedFile`, in name order) gives entries:

- each error finding of its check stages (the summary's first findings:
  `service.checks.runs.summary_for`): `id` the finding's code, `package` the
  model file, `#NODE` after it for a finding about a node, `version` the
  model file's SHA-256, severity `High`, and a description with the stage,
  the node and its operator, the field path and the byte offset; its
  `vendor_attributes` hold the same as fields, and the model's id in the
  service; with `--public-url`, `links` holds the link that opens the
  model's SARIF report without an API key (`service.imports.report_links`).
  Warnings are left out (they fail no verdict);
- errors past the summary's findings: one `High` entry `more-findings`
  counting them (the service's `GET /models/{id}/diagnostics` lists them);
- a stage that could not end (`incomplete`), or that was not run because
  another failed: one `High` entry (`stage-incomplete`), as the verdict
  fails closed;
- a model the service refused (the importer's refusal, a limit, a missing
  external file): one `Critical` entry, `id` the importer's refusal's kind
  (`refused` for another), with the refused field and its byte offset where
  the importer names them; one whose import could not end: one `High` entry
  `incomplete`.

Entries of one code at one package (a node) and version are merged into one,
each finding's description in it (Harbor keeps one record per id, package
and version). An artifact refused whole (its layers not pulled: a path leaving it, a link
in a tar layer, past a limit) is one `Critical` entry (`refused`) whose package is
the artifact. The report's `severity` is its entries' highest, `Unknown`
when it has none (an artifact that passes, or that holds no ONNX model), as
Harbor's own adapters write it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from service.attestation.statement import service_version
from service.registry.oci_api import DOCKER_MANIFEST, OCI_MANIFEST

METADATA_TYPE: Final = "application/vnd.scanner.adapter.metadata+json; version=1.0"
METADATA_TYPES: Final = ("application/vnd.scanner.adapter.metadata+json; version=1.1", METADATA_TYPE)
SCAN_RESPONSE_TYPE: Final = "application/vnd.scanner.adapter.scan.response+json; version=1.0"
ERROR_TYPE: Final = "application/vnd.scanner.adapter.error+json; version=1.0"
VULNERABILITY_REPORT_TYPE: Final = "application/vnd.security.vulnerability.report; version=1.1"
HARBOR_REPORT_TYPE: Final = "application/vnd.scanner.adapter.vuln.report.harbor+json; version=1.0"
REPORT_TYPES: Final = (VULNERABILITY_REPORT_TYPE, HARBOR_REPORT_TYPE)  # the same document, under either name
CONSUMED_TYPES: Final = (OCI_MANIFEST, DOCKER_MANIFEST)
MODELPACK_ARTIFACT: Final = "application/vnd.cncf.model.manifest.v1+json"
SCANNER_NAME: Final = "onnx-import"
SCANNER_VENDOR: Final = "ONNX import service"
SEVERITIES: Final = ("Unknown", "Negligible", "Low", "Medium", "High", "Critical")  # the spec's scale, lowest first
FINDING_SEVERITY: Final = "High"
REFUSED_SEVERITY: Final = "Critical"


@dataclass(frozen=True, slots=True)
class ScannedFile:
    """One `.onnx` file of a scanned artifact: its import's summary, or why it has none."""

    path: str
    summary: dict[str, Any] | None = None  # the import's summary (None: not imported)
    model_id: str = ""
    verdict: str = ""  # not imported: refused or incomplete
    code: str = ""  # not imported: the importer's refusal's kind
    reason: str = ""  # not imported: why
    field_path: str | None = None  # not imported: the importer's refused field
    offset: int | None = None  # ... and the byte offset of its key
    sha256: str = ""  # not imported: the model file's
    report_link: str = ""  # imported, with --public-url: the link that opens its SARIF report without an API key


def scanner() -> dict[str, str]:
    return {"name": SCANNER_NAME, "vendor": SCANNER_VENDOR, "version": service_version() or "unknown"}


def metadata(checks: str) -> dict[str, Any]:
    """The ScannerAdapterMetadata; `checks`, the stages each scan runs (`--oci-checks`)."""
    return {
        "scanner": scanner(),
        "capabilities": [{"type": "vulnerability", "consumes_mime_types": list(CONSUMED_TYPES), "produces_mime_types": list(REPORT_TYPES)}],
        "properties": {
            "harbor.scanner-adapter/scanner-type": "onnx-model-validation",
            "org.onnx-import.artifact-types": f"{MODELPACK_ARTIFACT}, or any OCI artifact with an .onnx layer",
            "org.onnx-import.checks": checks,
        },
    }


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _entry(
    identifier: str, package: str, version: str, severity: str, description: str, link: str = "", **attributes: Any
) -> dict[str, Any]:
    found: dict[str, Any] = {"id": identifier, "package": package, "version": version, "severity": severity, "description": description}
    if link:
        found["links"] = [link]
    kept = {key: value for key, value in attributes.items() if value not in (None, "")}
    return found | ({"vendor_attributes": kept} if kept else {})


def _finding_entry(file: ScannedFile, version: str, item: dict[str, Any]) -> dict[str, Any]:
    node, op_type = item.get("node_name"), item.get("op_type")
    place = f"node {node!r} ({op_type}), " if node is not None else ""
    description = (f"{item.get('message', '')} [stage {item.get('stage')}: {place}field {item.get('field_path')} "
                   f"at byte offset {item.get('offset')}]")  # fmt: skip
    return _entry(
        str(item.get("code", "")), f"{file.path}#{node}" if node else file.path, version, FINDING_SEVERITY, description,
        file.report_link, stage=item.get("stage"), node_name=node, op_type=op_type, domain=item.get("domain"),
        field_path=item.get("field_path"), offset=item.get("offset"), model_id=file.model_id,
    )  # fmt: skip


def _file_entries(file: ScannedFile) -> list[dict[str, Any]]:
    if file.summary is None:
        severity = REFUSED_SEVERITY if file.verdict == "refused" else FINDING_SEVERITY
        identifier = file.code or ("refused" if file.verdict == "refused" else "incomplete")
        said = "the service refused the model" if file.verdict == "refused" else "the model's import could not end"
        place = f" [field {file.field_path or 'ModelProto'} at byte offset {file.offset}]" if file.offset is not None else ""
        return [_entry(identifier, file.path, f"sha256:{file.sha256}" if file.sha256 else "", severity, f"{said}: {file.reason}{place}",
                       verdict=file.verdict, field_path=file.field_path, offset=file.offset)]  # fmt: skip
    sha256 = file.summary.get("model_file", {}).get("sha256", "")
    version = f"sha256:{sha256}" if sha256 else ""
    diagnostics = file.summary.get("diagnostics", {})
    errors = [item for item in diagnostics.get("items", []) if isinstance(item, dict) and item.get("severity") == "error"]
    entries = [_finding_entry(file, version, item) for item in errors]
    unlisted = int(diagnostics.get("errors", 0)) - len(errors)
    if unlisted > 0:
        entries.append(_entry(
            "more-findings", file.path, version, FINDING_SEVERITY,
            f"{unlisted} more error findings than this report lists: GET /models/{file.model_id}/diagnostics?severity=error "
            "on the service lists them all", file.report_link, model_id=file.model_id,
        ))  # fmt: skip
    for stage, entry in file.summary.get("checks", {}).items():
        if isinstance(entry, dict) and entry.get("status") in ("incomplete", "skipped"):
            said = f"the {stage} stage is {entry.get('status')}: {entry.get('reason', '')}".rstrip(": ")
            entries.append(_entry("stage-incomplete", f"{file.path}#{stage}", version, FINDING_SEVERITY,
                                  f"{said}; the model is not shown to pass it", file.report_link, stage=stage,
                                  model_id=file.model_id))  # fmt: skip
    return entries


def merged(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (id, package, version), in order: Harbor keeps one vulnerability record per triple. The
    findings of one code at one node are one entry, each finding's description in it, and the count."""
    kept: dict[tuple[str, str, str], dict[str, Any]] = {}
    for entry in entries:
        key = (entry["id"], entry["package"], entry["version"])
        if key not in kept:
            kept[key] = entry
            continue
        first = kept[key]
        first["description"] += f"; and {entry['description']}"
        attributes = first.setdefault("vendor_attributes", {})
        attributes["findings"] = attributes.get("findings", 1) + 1
    return list(kept.values())


def highest(entries: list[dict[str, Any]]) -> str:
    return max((str(entry["severity"]) for entry in entries), key=SEVERITIES.index, default="Unknown")


def vulnerability_report(artifact: dict[str, str], files: list[ScannedFile], refusal: str = "") -> dict[str, Any]:
    """The HarborVulnerabilityReport of a scan of `artifact` (the request's): its files' entries, or the artifact's refusal."""
    if refusal:
        what = f"{artifact.get('repository', '')}@{artifact.get('digest', '')}"
        entries = [_entry("refused", what, "", REFUSED_SEVERITY, f"the service refused the artifact: {refusal}", verdict="refused")]
    else:
        entries = merged([entry for file in files for entry in _file_entries(file)])
    return {
        "generated_at": now_rfc3339(),
        "artifact": artifact,
        "scanner": scanner(),
        "severity": highest(entries),
        "vulnerabilities": entries,
    }
