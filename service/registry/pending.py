"""The verdicts still to write to MLflow, kept on disk: `WriteBack`, `PendingWrites`, `write_back`.

A version's verdict is its tags (`onnx_import.*`), the files it logs in
MLflow's artifact proxy (its attestations,
`service.registry.version_attestations`) and, when it passes, the alias
moved to it unless a newer version holds it (`service.registry.alias`: the
rule, and `onnx_import.alias` saying what it did). `write_back` writes the
files first (a file written again is the same bytes again), then the tags,
then the alias, and `onnx_import.verdict` last: a reader that sees the
verdict sees the rest, and a reader that sees `onnx_import.attestation`
finds the files. A file MLflow refuses (other than for the service's
credentials) does not stop the verdict: the tag says it is not logged, and
why. A write kept and written later follows the same rule, read anew then.
When MLflow does not answer past the client's retries, the write is kept
(`service.registry.kept`: one JSON file per version under the service's
state, its files and tags together, within `MAX_KEPT`) and
`PendingWrites.drain` tries each again later, in one front-end process. So
is a write MLflow refuses the service's credentials for (401, 403:
fixable); one it refuses otherwise (the version deleted meanwhile) is
dropped, logged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from service.errors import bounded
from service.registry.alias import AliasRule
from service.registry.kept import AUTH_REFUSALS, KeptWrites, Outcome
from service.registry.mlflow_api import MAX_UPLOAD, MlflowApi, MlflowRefused, MlflowUnavailable, TooLarge, version_tag
from service.registry.sources import MAX_MODEL_FILES
from service.registry.verdict import ALIAS, ATTESTATION, MAX_REASON, VERDICT

log = logging.getLogger("service")

MAX_KEPT = 2 * MAX_MODEL_FILES * MAX_UPLOAD  # bytes of one kept write: an attestation per model (JSON in JSON), and the tags


@dataclass(frozen=True, slots=True)
class WriteBack:
    name: str
    version: str
    tags: dict[str, str] = field(default_factory=dict)
    alias: str = ""  # moved to the version when set (it passed), unless a newer version holds it
    unless_tagged: bool = False  # written only to a version without a verdict (one whose validation died)
    artifacts: dict[str, str] = field(default_factory=dict)  # files logged through the artifact proxy first: path -> text

    def key(self) -> str:
        return f"{self.name}\0{self.version}"

    def described(self) -> str:
        return f"the verdict of {self.name} version {self.version}"


async def write_back(api: MlflowApi, write: WriteBack, rule: AliasRule) -> None:
    """The files, the tags, the alias (by `rule`), and the verdict tag last (once it
    is there, the rest is); MlflowUnavailable if MLflow did not answer."""
    if write.unless_tagged and version_tag(await api.model_version(write.name, write.version), VERDICT) is not None:
        return
    tags = dict(write.tags)
    try:
        for path, text in write.artifacts.items():
            await api.upload(path, text.encode())
    except (MlflowRefused, TooLarge) as error:
        if isinstance(error, MlflowRefused) and error.status in AUTH_REFUSALS:
            raise
        log.error("mlflow: the attestation of %s version %s is not logged: %s", write.name, write.version, error)
        tags[ATTESTATION] = bounded(f"not logged: {error}", MAX_REASON)
    last = [(key, value) for key, value in tags.items() if key == VERDICT]
    for key, value in tags.items():
        if key == VERDICT:
            continue
        await api.set_tag(write.name, write.version, key, value)
    if write.alias:
        said = await rule.advance(api, write.name, write.alias, write.version)
        await api.set_tag(write.name, write.version, ALIAS, said)
    for key, value in last:
        await api.set_tag(write.name, write.version, key, value)


class PendingWrites:
    def __init__(self, folder: Path) -> None:
        self.kept = KeptWrites(folder, WriteBack, MAX_KEPT, "mlflow")

    def keep(self, write: WriteBack, *, replace: bool = True) -> None:
        """Keep `write` until `drain` writes it, in place of an earlier one for the same version
        (`replace=False`: unless there is one)."""
        self.kept.keep(write, replace=replace)

    def waiting(self) -> list[Path]:
        return self.kept.waiting()

    async def drain(self, api: MlflowApi, rule: AliasRule) -> int:
        """Write every kept write MLflow now takes; how many were written."""

        async def attempt(write: WriteBack) -> Outcome:
            try:
                await write_back(api, write, rule)
            except MlflowUnavailable as error:
                log.warning("mlflow: the verdict of %s version %s is still not written: %s", write.name, write.version, error)
                return Outcome.DOWN
            except MlflowRefused as error:
                if error.status in AUTH_REFUSALS:
                    log.error("mlflow: the verdict of %s version %s is kept: %s", write.name, write.version, error)
                    return Outcome.KEPT
                log.error("mlflow: the verdict of %s version %s was refused (%s); dropped", write.name, write.version, error)
                return Outcome.DROPPED
            log.info("mlflow: the kept verdict of %s version %s is written", write.name, write.version)
            return Outcome.WRITTEN

        return await self.kept.drain(attempt)
