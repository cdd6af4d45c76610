"""The OCI hook of one front-end process: `OciHook`, and the notification envelope's parsing (`pushed_manifests`).

Owns what a registry notification starts: `authorize` (the `Authorization:
Bearer SECRET` header the registry's endpoint is configured with, compared in
constant time; the secret from `ONNX_SERVICE_OCI_WEBHOOK_SECRET` or
`--oci-webhook-secret-file`), `pushed_manifests` (the manifest pushes of a
`application/vnd.docker.distribution.events.v1+json` envelope: only each
event's repository and digest are taken, checked, never its URL), `take` (a
manifest marked in the shared `Deliveries`, keyed by the registry, the
repository and the digest: a replayed event, or the same manifest pushed under
another tag, to any replica, runs nothing), `start` (the validation as a
background task: the route has answered already) and the validation itself:
the manifest pulled from `--oci-registry` by its digest; one that is not an
ONNX artifact (`service.registry.oci_artifact`), or has a verdict referrer
already, is left alone; else every layer pulled into a work folder within
the import's limits and `--worker-timeout` (`service.registry.oci_pull`),
each `.onnx` file imported through the pipeline as `--oci-tenant` with
`--oci-checks` (`service.registry.oci_source`), each file's verdict as the
MLflow gate's (`service.registry.verdict`), and the verdict referrer pushed
(`service.registry.oci_verdict`): where the service signs, it carries each
imported model's attestation, the tenant's latest (`Store.attestation`) when
it names this artifact (its resourceUri `oci://HOST/REPOSITORY@DIGEST`; a
concurrent import of the same model from another artifact may have replaced
it: that model is then left out, and `onnx-import verify` refuses the
artifact). A referrer the registry does not take when it is due (it does
not answer, or refuses the service's credentials) is kept and pushed later
by the background loop (`service.registry.oci_pending`), which prunes old
markers too. A validation under way when the service stops, or one whose
manifest could not be read for the same reasons, is kept to run again: the
next start (or another front end) runs it within a tick, without a new
event (the delivery marker stays: the kept validation is the retry).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from service.background import every, stopped
from service.checks.outcome import parse_checks
from service.checks.requested import CheckRequest
from service.imports import pipeline
from service.imports.parts import ImportParts
from service.registry.deliveries import Deliveries
from service.registry.hook import LOOP_SECONDS, classified, with_capacity
from service.registry.oci_api import MANIFEST_TYPES, OciRefused, OciRegistry, OciUnavailable, TooLarge, valid_reference
from service.registry.oci_artifact import Layer, onnx_layers, subject_of
from service.registry.oci_pending import KeptVerdict, PendingVerdicts, keeps_for_later, kept_referrer
from service.registry.oci_pull import ArtifactTree, pulled_in_time
from service.registry.oci_source import ArtifactFile
from service.registry.oci_verdict import attach, has_verdict, verdict_document
from service.registry.shared_secrets import bearer_of, secret_text
from service.registry.signature import Unsigned
from service.registry.sources import Refused
from service.registry.verdict import REASON, VERDICT, FileVerdict, file_imported, file_not_imported, not_imported, version_tags
from service.settings import Settings

log = logging.getLogger("service")

MAX_EVENTS = 100  # events of one envelope (distribution sends at most its threshold, 10 by default)


@dataclass(frozen=True, slots=True)
class Pushed:
    """A manifest push of an event: its repository and digest (checked), and the event's id for the log."""

    repository: str
    digest: str
    event_id: str


class BadEnvelope(Exception):
    """A body that is not a notification envelope: the reason."""


def pushed_manifests(envelope: Any) -> tuple[list[Pushed], list[str]]:
    """(the manifest pushes, the reasons other events were skipped) of a parsed envelope; BadEnvelope if it is none."""
    events = envelope.get("events") if isinstance(envelope, dict) else None
    if not isinstance(events, list):
        raise BadEnvelope('the body is not a notification envelope ({"events": [...]})')
    if len(events) > MAX_EVENTS:
        raise BadEnvelope(f"the envelope holds {len(events)} events, more than {MAX_EVENTS}")
    pushes, skipped = [], []
    for number, event in enumerate(events):
        target = event.get("target") if isinstance(event, dict) else None
        if not isinstance(event, dict) or not isinstance(target, dict):
            skipped.append(f"event {number}: not an event with a target")
            continue
        if event.get("action") != "push" or target.get("mediaType") not in MANIFEST_TYPES:
            continue  # a pull, a blob, an index (the referrers tag's own): nothing to validate
        repository, digest = target.get("repository"), target.get("digest")
        if not isinstance(repository, str) or not isinstance(digest, str) or not valid_reference(repository, digest):
            skipped.append(f"event {number}: its target's repository or digest is malformed")
            continue
        pushes.append(Pushed(repository, digest, str(event.get("id", ""))[:100]))
    return pushes, skipped


def webhook_secret(settings: Settings) -> str:
    """The secret from its variable, else its file (one trailing newline dropped)."""
    return secret_text(settings.oci_webhook_secret, settings.oci_webhook_secret_file)


class OciHook:
    def __init__(self, parts: ImportParts, registry: OciRegistry | None = None) -> None:
        settings = parts.settings
        self.parts = parts
        self.secret = webhook_secret(settings).encode()
        self.registry = registry or OciRegistry(settings.oci_registry, settings.oci_credentials)
        self.deliveries = Deliveries(parts.store.registry_rows())
        self.pending = PendingVerdicts(Path(settings.local_root) / "registry" / "oci-pending")
        self.checks = CheckRequest(parse_checks(settings.oci_checks))
        self.tasks: dict[asyncio.Task[None], Pushed] = {}

    def authorize(self, authorization: str | None) -> None:
        """Return if the header carries the notifications' bearer token; else Unsigned."""
        token = bearer_of(authorization)
        if token is None:
            raise Unsigned("the notification lacks Authorization: Bearer TOKEN")
        if not hmac.compare_digest(token, self.secret):
            raise Unsigned("the notification's bearer token is not the hook's")

    async def take(self, pushed: Pushed) -> bool:
        """False for a manifest taken already (by any replica)."""
        key = f"oci\0{self.registry.host}/{pushed.repository}@{pushed.digest}"
        return await anyio.to_thread.run_sync(self.deliveries.first, key)

    def start(self, pushed: Pushed) -> None:
        task = asyncio.create_task(self.validate(pushed), name=f"oci-{pushed.repository}@{pushed.digest[:19]}")
        self.tasks[task] = pushed
        task.add_done_callback(self.tasks.pop)

    def name_of(self, pushed: Pushed) -> str:
        return f"oci://{self.registry.host}/{pushed.repository}@{pushed.digest}"

    def _again(self, pushed: Pushed) -> KeptVerdict:
        return KeptVerdict(self.registry.host, pushed.repository, pushed.digest, validate_again=True)

    async def validate(self, pushed: Pushed) -> None:
        try:
            await self._validated(pushed)
        except asyncio.CancelledError:  # the service stops: run again at the next start (unless its referrer is kept)
            log.warning("oci: the validation of %s is kept to run again: the service stops", self.name_of(pushed))
            self.pending.keep(self._again(pushed), replace=False)
            raise

    async def _validated(self, pushed: Pushed) -> None:
        repository, digest = pushed.repository, pushed.digest
        try:
            manifest = await self.registry.manifest(repository, digest)
            document = manifest.json()
            refusal: Refused | None = None
            try:
                layers = onnx_layers(document, manifest.media_type)
            except Refused as error:  # an ONNX artifact whose manifest the gate will not follow: refused, with a referrer
                layers, refusal = [], error
            if layers is None:
                log.info("oci: %s is no ONNX artifact: ignored", self.name_of(pushed))
                return
            if await has_verdict(self.registry, repository, digest):
                log.info("oci: %s has a verdict referrer already: not validated again", self.name_of(pushed))
                return
        except (OciRefused, OciUnavailable, TooLarge) as error:
            log.warning("oci: %s could not be read (event %s): %s", self.name_of(pushed), pushed.event_id, error)
            if not isinstance(error, TooLarge) and keeps_for_later(error):
                log.warning("oci: the validation of %s is kept to run again", self.name_of(pushed))
                self.pending.keep(self._again(pushed))
            return
        log.info("oci: validating %s as tenant %s", self.name_of(pushed), self.parts.settings.oci_tenant)
        bundles: dict[str, bytes] = {}
        tags = not_imported("refused", str(refusal)) if refusal is not None else await self._checked(pushed, layers, bundles)
        said = f" ({tags.get(REASON, '')[:200]})" if tags[VERDICT] != "pass" else ""
        log.info("oci: %s: %s%s", self.name_of(pushed), tags[VERDICT], said)
        subject = subject_of(manifest.media_type, digest, len(manifest.body), document)
        verdict = verdict_document(tags, self.registry.host, repository, digest)
        kept = kept_referrer(self.registry.host, repository, digest, subject, tags, verdict, bundles)
        try:
            referrer = await attach(self.registry, repository, subject, tags, verdict, bundles)
        except asyncio.CancelledError:  # the service stops while the registry is retried: kept, not lost
            self.pending.keep(kept)
            raise
        except (OciRefused, OciUnavailable) as error:
            if not keeps_for_later(error):
                log.error("oci: the verdict of %s could not be attached: %s", self.name_of(pushed), error)
                return
            log.warning("oci: the verdict of %s is kept to attach later: %s", self.name_of(pushed), error)
            self.pending.keep(kept)
            return
        log.info("oci: %s: verdict referrer %s", self.name_of(pushed), referrer)

    async def _checked(self, pushed: Pushed, layers: list[Layer], bundles: dict[str, bytes]) -> dict[str, str]:
        """The verdict's tags (service.registry.verdict) of the artifact: its layers pulled, each model imported and checked;
        each imported model's attestation put in `bundles` by its path, where the service signs."""
        settings = self.parts.settings
        try:
            with self.parts.store.work_folder() as folder:
                tree = await pulled_in_time(self.registry, pushed.repository, layers, folder.root, settings)
                checked = [await self._file_checked(pushed, tree, path) for path in tree.models]
                for verdict in checked:
                    if verdict.model_id and (bundle := await self._attestation(pushed, verdict.model_id)) is not None:
                        bundles[verdict.file] = bundle
        except asyncio.CancelledError:
            raise
        except OciUnavailable as error:
            return not_imported("incomplete", f"the registry did not answer: {error}")
        except Exception as error:
            return not_imported(*classified(error, self.name_of(pushed)))
        return version_tags(checked, self._report_link)[1]

    async def _file_checked(self, pushed: Pushed, tree: ArtifactTree, path: str) -> FileVerdict:
        name = self.name_of(pushed) + (f"/{path}" if len(tree.models) > 1 else "")
        source = ArtifactFile(tree, path, name, self.name_of(pushed))
        tenant = self.parts.settings.oci_tenant
        try:
            result = await with_capacity(lambda: pipeline.run(self.parts, source, tenant, self.checks), f"oci: {name}")
        except asyncio.CancelledError:
            raise
        except Exception as error:
            return file_not_imported(path, *classified(error, name))
        return file_imported(path, result.summary, result.model_id)

    async def _attestation(self, pushed: Pushed, model_id: str) -> bytes | None:
        """The tenant's attestation of the model when the service signs and it names this artifact; else None."""
        if self.parts.attester is None:
            return None
        from service.attestation.bundle import carried_statement

        bundle = await anyio.to_thread.run_sync(self.parts.store.attestation, self.parts.settings.oci_tenant, model_id)
        predicate = carried_statement(bundle).get("predicate") if bundle else None
        if not isinstance(predicate, dict) or predicate.get("resourceUri") != self.name_of(pushed):
            log.warning("oci: %s: the attestation of model %s names another artifact: left out", self.name_of(pushed), model_id)
            return None
        return bundle

    def _report_link(self, model_ids: list[str]) -> str:
        settings = self.parts.settings
        return self.parts.links.report_link(settings.public_url, settings.oci_tenant, model_ids)

    async def _validate_again(self, kept: KeptVerdict) -> None:
        log.info("oci: validating %s again (kept)", f"oci://{kept.key()}")
        self.start(Pushed(kept.repository, kept.digest, "kept"))

    async def tick(self) -> None:
        try:
            await self.pending.drain(self.registry, self._validate_again)
            await anyio.to_thread.run_sync(self.deliveries.prune)
        except Exception:  # the loop goes on: the next tick tries again
            log.exception("oci: the background loop's kept verdicts or markers broke")

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The background loop while the block runs; then validations under way are stopped (kept to run again)."""
        try:
            async with every(LOOP_SECONDS, self.tick, "oci-pending"):
                yield
        finally:
            await stopped(self.tasks)
            await self.registry.close()
