"""The OCI gate's verdicts still to attach, kept on disk: `KeptVerdict` (`kept_referrer`), `PendingVerdicts`, `keeps_for_later`.

A verdict referrer the registry did not take when it was due (it did not
answer past the client's retries, answered 429 or 5xx, or refused the
service's credentials: 401, 403, which can be fixed) is kept
(`service.registry.kept`: one JSON file per artifact under the service's
state, its subject, tags, verdict JSON and signed bundles together, within
`MAX_KEPT`), and `PendingVerdicts.drain` pushes it later, in one front-end
process: the artifact's manifest read again first (gone meanwhile, 404: the
verdict is dropped, logged), then, unless the artifact has a verdict
referrer by then, the referrer as `service.registry.oci_verdict.attach`
pushes it. A referrer the registry refuses otherwise (400: it will not take
it) is dropped, logged. A validation that could not start (the manifest
unread for the same reasons) or that the service's shutdown cut off is kept
as one to run again (`KeptVerdict.validate_again`): the hook starts it anew
when it drains (at the next start, within a tick), without a new event,
once the manifest is read again (so that while the registry is down the
kept validations wait, not one started each per tick).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.registry.kept import AUTH_REFUSALS, KeptWrites, Outcome
from service.registry.oci_api import OciRefused, OciRegistry, OciUnavailable, TooLarge
from service.registry.oci_verdict import attach, has_verdict
from service.registry.sources import MAX_MODEL_FILES

log = logging.getLogger("service")

MAX_BUNDLE = 1 << 20  # bytes of one model's signed bundle (a few KiB)
MAX_KEPT = 2 * MAX_MODEL_FILES * MAX_BUNDLE  # bytes of one kept verdict: a bundle per model (base64 in JSON), and the verdict


@dataclass(frozen=True, slots=True)
class KeptVerdict:
    registry: str  # the registry's host: a verdict kept for another --oci-registry is dropped
    repository: str
    digest: str
    validate_again: bool = False  # the validation to run again (it could not start, or the service stopped it)
    subject: dict[str, Any] = field(default_factory=dict)  # the referrer's: its subject, tags, verdict JSON and bundles
    tags: dict[str, str] = field(default_factory=dict)
    document: dict[str, Any] = field(default_factory=dict)
    bundles: dict[str, str] = field(default_factory=dict)  # the model's path in the artifact -> its signed bundle, base64

    def key(self) -> str:
        return f"{self.registry}/{self.repository}@{self.digest}"

    def described(self) -> str:
        return f"the verdict of oci://{self.key()}"

    def signed_bundles(self) -> dict[str, bytes]:
        return {path: base64.b64decode(bundle) for path, bundle in self.bundles.items()}


def kept_referrer(
    registry: str, repository: str, digest: str, subject: dict[str, Any], tags: dict[str, str], document: dict[str, Any],
    bundles: dict[str, bytes],
) -> KeptVerdict:  # fmt: skip
    encoded = {path: base64.b64encode(bundle).decode() for path, bundle in bundles.items()}
    return KeptVerdict(registry, repository, digest, subject=subject, tags=tags, document=document, bundles=encoded)


def keeps_for_later(error: OciRefused | OciUnavailable) -> bool:
    """The registry did not answer, or refused the service's credentials (fixable): the write is kept."""
    return isinstance(error, OciUnavailable) or error.status in AUTH_REFUSALS or error.status == 429 or error.status >= 500


class PendingVerdicts:
    def __init__(self, folder: Path) -> None:
        self.kept = KeptWrites(folder, KeptVerdict, MAX_KEPT, "oci")

    def keep(self, verdict: KeptVerdict, *, replace: bool = True) -> None:
        """Keep `verdict` until `drain` attaches it (or runs its validation again), in place of an earlier one for
        the same artifact (`replace=False`: unless there is one)."""
        self.kept.keep(verdict, replace=replace)

    def waiting(self) -> list[Path]:
        return self.kept.waiting()

    async def drain(self, registry: OciRegistry, validate_again: Callable[[KeptVerdict], Awaitable[None]]) -> int:
        """Attach every kept referrer the registry now takes, and hand each validation to run again to
        `validate_again`; how many were attached or handed."""

        async def attempt(verdict: KeptVerdict) -> Outcome:
            if verdict.registry != registry.host:
                log.error("oci: %s is dropped: the service's registry is %s now", verdict.described(), registry.host)
                return Outcome.DROPPED
            if verdict.validate_again:
                return await _tried(registry, verdict, lambda: _handed(verdict, validate_again))
            return await _tried(registry, verdict, lambda: _attached(registry, verdict))

        return await self.kept.drain(attempt)


async def _tried(registry: OciRegistry, verdict: KeptVerdict, then: Callable[[], Awaitable[Outcome]]) -> Outcome:
    """`then()` once the artifact's manifest is read again (it is still there, and the registry answers);
    else what its failure, or `then`'s, says of the kept verdict."""
    try:
        await registry.manifest(verdict.repository, verdict.digest)
        return await then()
    except (OciRefused, OciUnavailable) as error:
        if not keeps_for_later(error):
            log.error("oci: %s was refused (%s); dropped", verdict.described(), error)
            return Outcome.DROPPED
        log.warning("oci: %s is still not attached: %s", verdict.described(), error)
        return Outcome.KEPT if isinstance(error, OciRefused) and error.status in AUTH_REFUSALS else Outcome.DOWN
    except TooLarge as error:
        log.error("oci: %s is dropped: %s", verdict.described(), error)
        return Outcome.DROPPED


async def _handed(verdict: KeptVerdict, validate_again: Callable[[KeptVerdict], Awaitable[None]]) -> Outcome:
    await validate_again(verdict)
    return Outcome.WRITTEN


async def _attached(registry: OciRegistry, verdict: KeptVerdict) -> Outcome:
    if await has_verdict(registry, verdict.repository, verdict.digest):
        log.info("oci: %s has a verdict referrer by now: the kept one is dropped", verdict.described())
        return Outcome.DROPPED
    referrer = await attach(registry, verdict.repository, verdict.subject, verdict.tags, verdict.document, verdict.signed_bundles())
    log.info("oci: %s is attached: verdict referrer %s", verdict.described(), referrer)
    return Outcome.WRITTEN
