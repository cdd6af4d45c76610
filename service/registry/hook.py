"""The MLflow hook of one front-end process: `RegistryHook`.

Owns what a delivery starts: `take` (signature, then the delivery id marked
in the shared `Deliveries`, in the store's index: a replay to any replica is
not validated again), `start` (the validation as a background task; the
route has answered 202 already), the validation itself
(`service.registry.version_source`: the version's files, each imported and
checked in turn, each import waiting for capacity on its own; then the
verdict's tags, `service.registry.verdict`, with the comparison to the
version holding the alias, their report and diff links made by the parts'
`ReportLinks` so that they open without an API key; where the service
signs, each model's attestation, logged beside the version's folder,
`service.registry.version_attestations`; then the alias, moved only to a
version that passes and only forward, `service.registry.alias`), and the
background loop (`running`) that writes kept verdicts (`PendingWrites`),
gives the verdict incomplete to validations whose process died (`UnderWay`)
and prunes old delivery markers. Its other state is under the service's local root
(`registry/`), shared by every front-end process. A validation under way
when the service stops is given the verdict incomplete (kept, written at
the next start if MLflow does not take it now).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio.to_thread

from service.background import every, stopped
from service.checks.outcome import parse_checks
from service.checks.requested import CheckRequest
from service.errors import BadInput, DomainError, ImportFailed, ImportTooLarge, Overloaded, UploadTooLarge
from service.imports.answers import Imported
from service.imports.diffs import Diffs
from service.imports.parts import ImportParts
from service.registry.alias import AliasRule
from service.registry.deliveries import Deliveries
from service.registry.kept import AUTH_REFUSALS
from service.registry.mlflow_api import MlflowApi, MlflowRefused, MlflowUnavailable, version_tag
from service.registry.pending import PendingWrites, WriteBack, write_back
from service.registry.shared_secrets import secret_text
from service.registry.signature import verify_delivery
from service.registry.sources import Refused
from service.registry.under_way import UnderWay
from service.registry.verdict import (
    MODEL_ID,
    REASON,
    VERDICT,
    FileVerdict,
    compared,
    file_imported,
    file_not_imported,
    not_imported,
    version_tags,
)
from service.registry.version_attestations import version_attestations
from service.registry.version_source import VersionFiles, import_file, version_files
from service.settings import Settings

log = logging.getLogger("service")

LOOP_SECONDS = 5.0  # how often kept verdicts are written again
OVERLOADED_WAITS = (5.0, 10.0, 20.0, 30.0, 60.0)  # seconds waited for import capacity before the verdict is incomplete
REFUSED_KINDS = {"Malformed", "InvalidModel", "Unsupported", "ExternalData"}  # importer refusals: the model, not the service


def classified(error: Exception, what: str) -> tuple[str, str]:
    """(verdict, reason) of a validation, or one file's, cut short by `error`: refused (the
    version or the model) or incomplete (the service or MLflow could not end it)."""
    if isinstance(error, Refused | MlflowRefused):
        return "refused", str(error)
    if isinstance(error, ImportTooLarge | UploadTooLarge | BadInput):
        return "refused", error.detail
    if isinstance(error, ImportFailed):
        kind = error.failure.kind
        return ("refused" if kind in REFUSED_KINDS and error.limit is None else "incomplete"), f"{kind}: {error.detail}"
    if isinstance(error, MlflowUnavailable):
        return "incomplete", f"MLflow did not answer: {error}"
    if isinstance(error, DomainError):
        return "incomplete", f"{type(error).__name__}: {error.detail}"
    log.error("mlflow: the validation of %s broke", what, exc_info=error)  # a bug of ours: still a verdict, never silence
    return "incomplete", f"internal error: {type(error).__name__}"


async def with_capacity(run: Callable[[], Awaitable[Imported]], what: str) -> Imported:
    """`run()`, again after each of OVERLOADED_WAITS while the service has no import capacity (Overloaded)."""
    for wait in (*OVERLOADED_WAITS, None):
        try:
            return await run()
        except Overloaded:
            if wait is None:
                raise
            log.info("%s: no import capacity; again in %.0f s", what, wait)
            await asyncio.sleep(wait)
    raise AssertionError("unreachable")


def webhook_secret(settings: Settings) -> str:
    """The secret from its variable, else its file (one trailing newline dropped)."""
    return secret_text(settings.mlflow_webhook_secret, settings.mlflow_webhook_secret_file)


class RegistryHook:
    def __init__(self, parts: ImportParts, diffs: Diffs, api: MlflowApi | None = None) -> None:
        settings = parts.settings
        self.parts = parts
        self.diffs = diffs
        self.secret = webhook_secret(settings)
        self.api = api or MlflowApi(settings.mlflow_url)
        root = Path(settings.local_root) / "registry"
        rows = parts.store.registry_rows()
        self.deliveries = Deliveries(rows)
        self.alias_rule = AliasRule(rows)
        self.pending = PendingWrites(root / "pending")
        self.under_way = UnderWay(root / "under-way")
        self.checks = CheckRequest(parse_checks(settings.mlflow_checks))
        self.tasks: dict[asyncio.Task[None], tuple[str, str]] = {}

    async def take(self, delivery_id: str | None, timestamp: str | None, signature: str | None, body: bytes) -> bool:
        """Unsigned (signature.py) unless MLflow signed it; False for a delivery already taken (by any replica)."""
        verify_delivery(self.secret, delivery_id, timestamp, signature, body, time.time())
        assert delivery_id is not None
        return await anyio.to_thread.run_sync(self.deliveries.first, delivery_id)

    def start(self, name: str, version: str) -> None:
        """Validate the version in the background."""
        marker = self.under_way.begin(name, version)
        task = asyncio.create_task(self.validate(name, version), name=f"mlflow-{name}-{version}")
        task.add_done_callback(lambda _: self.under_way.end(marker))
        self.tasks[task] = (name, version)
        task.add_done_callback(self.tasks.pop)

    async def validate(self, name: str, version: str) -> None:
        settings = self.parts.settings
        log.info("mlflow: validating %s version %s as tenant %s", name, version, settings.mlflow_tenant)
        alias = ""
        artifacts: dict[str, str] = {}
        try:
            files = await version_files(self.parts, self.api, name, version)
            checked = [await self._file_checked(files, path) for path in files.paths]
        except asyncio.CancelledError:
            self.pending.keep(WriteBack(name, version, not_imported("incomplete", "the service stopped during the validation")))
            raise
        except Exception as error:
            tags = not_imported(*classified(error, f"{name} version {version}"))
            verdict = tags[VERDICT]
        else:
            verdict, tags = version_tags(checked, self._report_link)
            artifacts, attestation = await version_attestations(self.parts, files, checked)
            tags |= attestation
            first = next((file for file in checked if file.model_id), None)
            if first is not None:
                tags |= await self._compared(name, version, first.model_id)
            alias = settings.mlflow_alias if verdict == "pass" else ""
        said = f" ({tags.get(REASON, '')[:200]})" if verdict != "pass" else ""
        log.info("mlflow: %s version %s: %s%s", name, version, verdict, said)
        await self.write(WriteBack(name, version, tags, alias, artifacts=artifacts))

    async def _file_checked(self, files: VersionFiles, path: str) -> FileVerdict:
        """One file of the version imported and checked: its verdict (refused or incomplete, with the reason, if it could not be)."""
        try:
            result = await self._imported(files, path)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            return file_not_imported(path, *classified(error, files.display_name(path)))
        return file_imported(path, result.summary, result.model_id)

    async def _imported(self, files: VersionFiles, path: str) -> Imported:
        tenant = self.parts.settings.mlflow_tenant
        return await with_capacity(lambda: import_file(self.parts, files, path, tenant, self.checks), f"mlflow: {files.display_name(path)}")

    async def _compared(self, name: str, version: str, model_id: str) -> dict[str, str]:
        """The tags comparing the version with the one holding the alias (none
        when no other version holds it, or MLflow cannot say which does)."""
        settings = self.parts.settings
        try:
            holder = await self.api.version_by_alias(name, settings.mlflow_alias)
        except (MlflowRefused, MlflowUnavailable):  # no version holds it yet (404), or MLflow is away: no comparison
            return {}
        held = str(holder.get("version", ""))
        if not held or held == version:
            return {}
        before = version_tag(holder, MODEL_ID) or ""
        if not before:
            return compared(None, held, why_not=f"version {held} has no {MODEL_ID} tag")
        try:
            diff = await self.diffs.compare(self.parts, settings.mlflow_tenant, before, model_id)
        except DomainError as error:  # that model left the store, or the two are too large to compare
            return compared(None, held, why_not=f"{type(error).__name__}: {error.detail}")
        except Exception as error:  # a bug of ours: the verdict is still written, without the comparison
            log.exception("mlflow: comparing %s version %s with version %s broke", name, version, held)
            return compared(None, held, why_not=f"internal error: {type(error).__name__}")
        link = self.parts.links.diff_link(settings.public_url, settings.mlflow_tenant, before, model_id)
        return compared(diff.head, held, link)

    def _report_link(self, model_ids: list[str]) -> str:
        """A link that opens the SARIF report of `model_ids` (one run each) without an API key."""
        settings = self.parts.settings
        return self.parts.links.report_link(settings.public_url, settings.mlflow_tenant, model_ids)

    async def write(self, write: WriteBack) -> None:
        """Write the verdict now, else keep it for the background loop."""
        try:
            await write_back(self.api, write, self.alias_rule)
        except MlflowUnavailable as error:
            log.warning("mlflow: the verdict of %s version %s is kept to write later: %s", write.name, write.version, error)
            self.pending.keep(write)
        except MlflowRefused as error:
            if error.status in AUTH_REFUSALS:  # the service's credentials, which can be fixed: kept
                self.pending.keep(write)
            log.error("mlflow: MLflow refused the verdict of %s version %s: %s", write.name, write.version, error)
        except asyncio.CancelledError:  # the service stops while MLflow is retried: the verdict is kept, not lost
            self.pending.keep(write)
            raise

    async def tick(self) -> None:
        try:
            for name, version in self.under_way.orphans():  # validations of a front end that died
                log.warning("mlflow: the validation of %s version %s died with its process; verdict incomplete", name, version)
                tags = not_imported("incomplete", "the service's process stopped during the validation")
                self.pending.keep(WriteBack(name, version, tags, unless_tagged=True), replace=False)
            await self.pending.drain(self.api, self.alias_rule)
            await anyio.to_thread.run_sync(self.deliveries.prune)
        except Exception:  # the loop goes on: the next tick tries again
            log.exception("mlflow: the background loop's write-back broke")

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The background loop while the block runs; then validations under way are stopped (incomplete)."""
        try:
            async with every(LOOP_SECONDS, self.tick, "mlflow-pending"):
                yield
        finally:
            await stopped(self.tasks)
            await self.api.close()
