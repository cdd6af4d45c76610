"""The Harbor scanner of one front-end process: `HarborScanner`, and the scan request's parsing (`scan_request`).

Harbor's Scanner Adapter API v1.2 (`service.api.routes.harbor` serves it
under `/harbor/api/v1`): Harbor is registered with a bearer token
(`ONNX_SERVICE_HARBOR_TOKEN` or `--harbor-token-file`), which `authorize`
compares in constant time. `scan_request` takes Harbor's ScanRequest: its
`registry.url` must be `--oci-registry` (`same_registry`: scheme, host and
port, and path, compared), else `BadScanRequest` (400): the scanner never
fetches from elsewhere; the artifact's repository and digest are checked as
the OCI gate's are (422 otherwise), and an artifact of a media type the
scanner does not consume, or a request that enables no vulnerability
capability, is 501. The request's `authorization` (Harbor's robot account,
`Basic ...` or `Bearer ...`, whose token exchange `service.registry.oci_api`
makes) is what the pull uses; without one, `--oci-credentials`.

`accept` writes the scan in the shared SQL index (`service.store.sql.registry_rows`,
running, with a lease this process renews every `LOOP_SECONDS` while it
runs it) and runs it in the background, at most `--workers` scans of the
process at once (the others wait their turn before they pull anything,
their layers on no disk yet): the manifest pulled from
`--oci-registry` by its digest; what `service.registry.oci_artifact` does not
take as an ONNX artifact is reported with no entries; its layers pulled
within the import's limits and `--worker-timeout` (`service.registry.oci_pull`),
each `.onnx` file imported through the pipeline as `--oci-tenant` with
`--oci-checks` (`service.registry.oci_source`, as the OCI gate does), each
import waiting for capacity as the gates' do (`service.registry.hook.with_capacity`);
then the report (`service.registry.harbor_report`) written to the scan's
row. A scan that could not end (the registry unreachable or refusing the
pull, no import capacity after every wait, the service stopping) is written
as an error, which the report route answers 500: Harbor then marks the scan
failed, and it can be asked again. `report` reads the row from any front end
of any replica; a running scan whose lease lapsed (its process died) is an
error too. Scans are removed `KEEP_SECONDS` after they were asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread

from service.background import every, stopped
from service.checks.outcome import parse_checks
from service.checks.requested import CheckRequest
from service.errors import BadInput, ImportFailed, Overloaded, UploadTooLarge
from service.imports import pipeline
from service.imports.parts import ImportParts
from service.registry.harbor_report import CONSUMED_TYPES, ScannedFile, vulnerability_report
from service.registry.hook import LOOP_SECONDS, OVERLOADED_WAITS, classified, with_capacity
from service.registry.oci_api import OciRefused, OciRegistry, OciUnavailable, TooLarge, valid_reference
from service.registry.oci_artifact import onnx_layers
from service.registry.oci_pull import ArtifactTree, pulled_in_time
from service.registry.oci_source import ArtifactFile
from service.registry.shared_secrets import bearer_of, secret_text
from service.registry.sources import Refused
from service.settings import Settings
from service.store.sql.registry_rows import ScanRow

log = logging.getLogger("service")

LEASE_SECONDS = 60.0  # a running scan's lease, renewed every LOOP_SECONDS by its process
KEEP_SECONDS = 24 * 3600.0  # a scan's row is kept this long after it was asked for
MAX_AUTHORIZATION = 8192  # characters of the request's Authorization value
MAX_FIELD = 1000  # characters of the artifact's tag and media type


class BadScanRequest(Exception):
    """A scan request the scanner will not run: the HTTP status (400, 422 or 501) and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ScanFailed(Exception):
    """A scan that could not end: its report is an error."""


@dataclass(frozen=True, slots=True)
class ScanRequest:
    repository: str
    digest: str
    authorization: str  # "" for none: --oci-credentials
    artifact: dict[str, str]  # as the report gives it back: repository, digest, and the tag and media type if given


def harbor_token(settings: Settings) -> str:
    """The token from its variable, else its file (one trailing newline dropped); "" when the scanner is off."""
    return secret_text(settings.harbor_token, settings.harbor_token_file)


def _origin(url: str) -> tuple[str, str, int | None, str]:
    parts = urlsplit(url.strip())
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    return parts.scheme.lower(), (parts.hostname or "").lower(), port, parts.path.rstrip("/")


def same_registry(given: str, configured: str) -> bool:
    """`given` names the registry `configured` names (scheme, host, port and path; a default port as none)."""
    try:
        return bool(given) and _origin(given) == _origin(configured)
    except ValueError:  # a port that is no number
        return False


def scan_request(body: Any, registry_url: str) -> ScanRequest:
    """The scan `body` (a parsed ScanRequest) asks for; BadScanRequest if the scanner will not run it."""
    if not isinstance(body, dict):
        raise BadScanRequest(400, "the body is not a ScanRequest (a JSON object)")
    registry, artifact = body.get("registry"), body.get("artifact")
    if not isinstance(registry, dict) or not isinstance(artifact, dict):
        raise BadScanRequest(400, "the ScanRequest lacks its registry or artifact object")
    url, authorization = registry.get("url"), registry.get("authorization", "")
    if not isinstance(url, str) or not isinstance(authorization, str):
        raise BadScanRequest(400, "registry.url and registry.authorization must be strings")
    if not same_registry(url, registry_url):
        raise BadScanRequest(400, f"registry.url {url[:200]!r} is not the registry this scanner pulls from (--oci-registry)")
    if len(authorization) > MAX_AUTHORIZATION or not authorization.isprintable():
        raise BadScanRequest(400, "registry.authorization is not an Authorization header's value")
    repository, digest = artifact.get("repository"), artifact.get("digest")
    if not isinstance(repository, str) or not isinstance(digest, str) or not valid_reference(repository, digest):
        raise BadScanRequest(422, "artifact.repository and artifact.digest must be a repository name and a sha256:HEX digest")
    echoed = {"repository": repository, "digest": digest}
    for key in ("tag", "mime_type"):
        value = artifact.get(key)
        if value is not None and (not isinstance(value, str) or len(value) > MAX_FIELD):
            raise BadScanRequest(400, f"artifact.{key} must be a string of at most {MAX_FIELD} characters")
        if value:
            echoed[key] = value
    if echoed.get("mime_type", CONSUMED_TYPES[0]) not in CONSUMED_TYPES:
        raise BadScanRequest(501, f"the scanner takes {' and '.join(CONSUMED_TYPES)} artifacts, not {echoed['mime_type']!r}")
    enabled = body.get("enabled_capabilities")
    if isinstance(enabled, list) and not any(isinstance(item, dict) and item.get("type") == "vulnerability" for item in enabled):
        raise BadScanRequest(501, "the scanner has the vulnerability capability only, which the request does not enable")
    return ScanRequest(repository, digest, authorization.strip(), echoed)


def _sha256(path: Path) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


class HarborScanner:
    def __init__(self, parts: ImportParts) -> None:
        settings = parts.settings
        self.parts = parts
        self.token = harbor_token(settings).encode()
        self.rows = parts.store.registry_rows()
        self.checks = CheckRequest(parse_checks(settings.oci_checks))
        self.tasks: dict[asyncio.Task[None], str] = {}  # this process's running scans -> their ids
        self.pulling = asyncio.Semaphore(max(1, settings.workers))  # scans past it wait before they pull anything

    def authorize(self, authorization: str | None) -> bool:
        """The header carries the bearer token Harbor is registered with."""
        token = bearer_of(authorization)
        return token is not None and hmac.compare_digest(token, self.token)

    async def accept(self, request: ScanRequest) -> str:
        """The scan written as running (shared by every replica) and started; its id."""
        scan_id = str(uuid.uuid4())
        await anyio.to_thread.run_sync(self.rows.begin_scan, scan_id, LEASE_SECONDS)
        task = asyncio.create_task(self._run(scan_id, request), name=f"harbor-{scan_id}")
        self.tasks[task] = scan_id
        task.add_done_callback(self.tasks.pop)
        return scan_id

    async def report(self, scan_id: str) -> ScanRow | None:
        return await anyio.to_thread.run_sync(self.rows.scan, scan_id)

    def name_of(self, request: ScanRequest) -> str:
        return f"oci://{urlsplit(self.parts.settings.oci_registry).netloc}/{request.repository}@{request.digest}"

    async def _run(self, scan_id: str, request: ScanRequest) -> None:
        settings = self.parts.settings
        registry = OciRegistry(settings.oci_registry, settings.oci_credentials, authorization=request.authorization or None)
        log.info("harbor: scan %s of %s as tenant %s", scan_id, self.name_of(request), settings.oci_tenant)
        state, body = "error", "the service stopped during the scan"
        try:
            async with self.pulling:
                report = await self._scanned(registry, request)
            state, body = "done", json.dumps(report, separators=(",", ":"), ensure_ascii=False)
            log.info("harbor: scan %s: %d entries, severity %s", scan_id, len(report["vulnerabilities"]), report["severity"])
        except ScanFailed as error:
            body = str(error)
            log.warning("harbor: scan %s of %s failed: %s", scan_id, self.name_of(request), error)
        except Exception as error:  # a bug of ours: still an answer, never a scan running for ever
            body = f"internal error: {type(error).__name__}"
            log.exception("harbor: scan %s of %s broke", scan_id, self.name_of(request))
        finally:
            with anyio.CancelScope(shield=True):
                await registry.close()
                try:
                    await anyio.to_thread.run_sync(self.rows.end_scan, scan_id, state, body)
                except Exception:  # its lease lapses: answered as an error
                    log.exception("harbor: the end of scan %s could not be written", scan_id)

    async def _scanned(self, registry: OciRegistry, request: ScanRequest) -> dict[str, Any]:
        """The scan's report; ScanFailed if the artifact could not be read or checked."""
        settings = self.parts.settings
        try:
            manifest = await registry.manifest(request.repository, request.digest)
            document = manifest.json()
        except (OciRefused, OciUnavailable, TooLarge) as error:
            raise ScanFailed(f"the artifact could not be read from the registry: {error}") from None
        try:
            layers = onnx_layers(document, manifest.media_type)
            if layers is None:
                log.info("harbor: %s is no ONNX artifact: nothing to report", self.name_of(request))
                return vulnerability_report(request.artifact, [])
            with self.parts.store.work_folder() as folder:
                tree = await pulled_in_time(registry, request.repository, layers, folder.root, settings)
                files = [await self._file_scanned(request, tree, path) for path in tree.models]
        except (Refused, UploadTooLarge, BadInput) as error:
            return vulnerability_report(request.artifact, [], refusal=classified(error, self.name_of(request))[1])
        except OciUnavailable as error:
            raise ScanFailed(f"the registry did not answer: {error}") from None
        return vulnerability_report(request.artifact, files)

    async def _file_scanned(self, request: ScanRequest, tree: ArtifactTree, path: str) -> ScannedFile:
        name = self.name_of(request) + (f"/{path}" if len(tree.models) > 1 else "")
        source = ArtifactFile(tree, path, name, self.name_of(request))
        tenant = self.parts.settings.oci_tenant
        try:
            result = await with_capacity(lambda: pipeline.run(self.parts, source, tenant, self.checks), f"harbor: {name}")
        except asyncio.CancelledError:
            raise
        except Overloaded:
            raise ScanFailed(f"the service had no import capacity for {sum(OVERLOADED_WAITS):.0f} s: scan again later") from None
        except Exception as error:
            verdict, reason = classified(error, name)
            sha256 = await anyio.to_thread.run_sync(_sha256, tree.root / path)
            if isinstance(error, ImportFailed) and verdict == "refused":
                failure = error.failure
                return ScannedFile(path, verdict=verdict, code=failure.kind, reason=reason, field_path=failure.field_path,
                                   offset=failure.offset, sha256=sha256)  # fmt: skip
            return ScannedFile(path, verdict=verdict, reason=reason, sha256=sha256)
        settings = self.parts.settings
        link = self.parts.links.report_link(settings.public_url, tenant, [result.model_id]) if settings.public_url else ""
        return ScannedFile(path, json.loads(result.summary), result.model_id, report_link=link)

    async def tick(self) -> None:
        try:
            await anyio.to_thread.run_sync(self.rows.renew_scans, list(self.tasks.values()), LEASE_SECONDS)
            await anyio.to_thread.run_sync(self.rows.prune_scans, KEEP_SECONDS)
        except Exception:  # the loop goes on: the next tick tries again
            log.exception("harbor: renewing or pruning the scans broke")

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The background loop while the block runs; then scans under way are stopped (written as errors)."""
        try:
            async with every(LOOP_SECONDS, self.tick, "harbor-scans"):
                yield
        finally:
            await stopped(self.tasks)
