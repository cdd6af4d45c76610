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
When MLflow does not answer past the client's retries, the write is kept in
a folder under the service's state (one JSON file per version, its files
and tags together, within `MAX_KEPT`, written to a temporary name and
renamed), and `PendingWrites.drain` tries each again later (the hook's
background loop, in every front-end process: a file is taken under a
non-waiting `flock`, so one process writes it). So is a write MLflow
refuses the service's credentials for (401, 403: fixable); one it refuses
otherwise (the version deleted meanwhile) is dropped, logged.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from service.errors import bounded
from service.registry.alias import AliasRule
from service.registry.mlflow_api import MAX_UPLOAD, MlflowApi, MlflowRefused, MlflowUnavailable, TooLarge, version_tag
from service.registry.sources import MAX_MODEL_FILES
from service.registry.verdict import ALIAS, ATTESTATION, MAX_REASON, VERDICT

log = logging.getLogger("service")

AUTH_REFUSALS = (401, 403)  # MLflow refusing the service's credentials: a write is kept until they are fixed
MAX_KEPT = 2 * MAX_MODEL_FILES * MAX_UPLOAD  # bytes of one kept write: an attestation per model (JSON in JSON), and the tags


@dataclass(frozen=True, slots=True)
class WriteBack:
    name: str
    version: str
    tags: dict[str, str] = field(default_factory=dict)
    alias: str = ""  # moved to the version when set (it passed), unless a newer version holds it
    unless_tagged: bool = False  # written only to a version without a verdict (one whose validation died)
    artifacts: dict[str, str] = field(default_factory=dict)  # files logged through the artifact proxy first: path -> text


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
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def _path(self, write: WriteBack) -> Path:
        return self.folder / (hashlib.sha256(f"{write.name}\0{write.version}".encode()).hexdigest() + ".json")

    def keep(self, write: WriteBack, *, replace: bool = True) -> None:
        """Keep `write` until `drain` writes it, in place of an earlier one for the same version
        (`replace=False`: unless there is one)."""
        path = self._path(write)
        if not replace and path.exists():
            return
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        with open(temporary, "w") as out:
            json.dump(asdict(write), out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)

    def waiting(self) -> list[Path]:
        return sorted(self.folder.glob("*.json"))

    async def drain(self, api: MlflowApi, rule: AliasRule) -> int:
        """Write every kept write MLflow now takes; how many were written."""
        written = 0
        for path in self.waiting():
            with _taken(path) as fd:
                if fd is None:
                    continue  # another process is writing it, or wrote it
                try:
                    write = WriteBack(**json.loads(_read(fd)))
                except (ValueError, TypeError) as error:
                    log.error("mlflow: a kept write-back %s is unreadable (%s); dropped", path.name, error)
                    path.unlink(missing_ok=True)
                    continue
                try:
                    await write_back(api, write, rule)
                except MlflowUnavailable as error:
                    log.warning("mlflow: the verdict of %s version %s is still not written: %s", write.name, write.version, error)
                    return written  # MLflow is down: the others wait too
                except MlflowRefused as error:
                    if error.status in AUTH_REFUSALS:
                        log.error("mlflow: the verdict of %s version %s is kept: %s", write.name, write.version, error)
                        continue  # the service's credentials: kept until they are fixed
                    log.error("mlflow: the verdict of %s version %s was refused (%s); dropped", write.name, write.version, error)
                else:
                    log.info("mlflow: the kept verdict of %s version %s is written", write.name, write.version)
                    written += 1
                path.unlink(missing_ok=True)
        return written


def _read(fd: int) -> bytes:
    """The kept write's bytes (ValueError past MAX_KEPT: never a part of it)."""
    with os.fdopen(os.dup(fd), "rb") as kept:
        data = kept.read(MAX_KEPT + 1)
    if len(data) > MAX_KEPT:
        raise ValueError(f"more than {MAX_KEPT} bytes")
    return data


@contextlib.contextmanager
def _taken(path: Path) -> Iterator[int | None]:
    """`path` open and locked by this process, or None (gone, or locked elsewhere)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield None
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        if not os.path.exists(path) or os.fstat(fd).st_ino != os.stat(path).st_ino:
            yield None  # written and removed, or replaced, meanwhile
            return
        yield fd
    finally:
        os.close(fd)
