"""The alias only moves forward: `AliasRule`, and the tag that says what it did.

A version that passes is given the alias (`--mlflow-alias`) only if no newer
version holds it: the alias goes to the newest passing version, by version
number, whatever order the validations end in. Just before moving it, the
rule reads who holds it now (MLflow's `registered-models/alias`); a holder
with a higher number keeps it. The read and the move are one step for the
whole fleet: they run under a claim on the registered model's alias in the
shared SQL index (`service.store.sql.registry_rows`), taken by one front end
of one replica at a time. A claim is a row with a lease (`CLAIM_SECONDS`),
not a lock the database holds while MLflow is called: nothing else of the
index waits on MLflow. The calls under it are bounded by the lease, so a
holder never acts past it; a claim left by a process that died lapses with
its lease. A claim not had within `WAIT_SECONDS`, an index that does not
answer, or calls past the lease are `AliasNotNow` (an `MlflowUnavailable`):
the write is kept and written again later (`service.registry.pending`),
under the same rule.

`onnx_import.alias` says what the rule did, for a version that passed:
`moved here (from version N)`, `moved here (no version held it)`, `already
here`, or `kept on version N (newer)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio.to_thread

from service.errors import StorageUnavailable
from service.registry.mlflow_api import MlflowApi, MlflowRefused, MlflowUnavailable
from service.store.sql.registry_rows import RegistryRows

CLAIM_SECONDS = 60.0  # a claim's lease: the read and the move must end within it
WAIT_SECONDS = 120.0  # how long a claim is waited for before the write is kept for later
POLL_SECONDS = (0.02, 0.05, 0.1, 0.2, 0.5)  # the waits between two tries of a claim, then the last one again
T = TypeVar("T")


class AliasNotNow(MlflowUnavailable):
    """The alias cannot be moved now (its claim not had, the index not answering, MLflow too slow): the write is kept."""


def _no_alias(error: MlflowRefused) -> bool:
    """MLflow's answer for an alias no version holds: 404, or (MLflow 3) 400 "Registered model alias ... not found"."""
    return error.status == 404 or (error.status == 400 and "alias" in error.message and "not found" in error.message)


def _number(version: str) -> int:
    return int(version) if version.isdigit() else -1


class AliasRule:
    def __init__(self, rows: RegistryRows) -> None:
        self.rows = rows

    @asynccontextmanager
    async def _claimed(self, name: str, alias: str) -> AsyncIterator[None]:
        key = hashlib.sha256(f"alias\0{name}\0{alias}".encode()).hexdigest()
        holder = os.urandom(16).hex()
        deadline = time.monotonic() + WAIT_SECONDS
        tries = 0
        while not await _index(self.rows.claim, key, holder, CLAIM_SECONDS):
            if time.monotonic() > deadline:
                raise AliasNotNow(f"the alias {alias!r} of {name!r} stayed claimed by another validation for {WAIT_SECONDS:.0f} s")
            await asyncio.sleep(POLL_SECONDS[min(tries, len(POLL_SECONDS) - 1)])
            tries += 1
        try:
            yield
        finally:
            with contextlib.suppress(AliasNotNow):  # the index away: the claim lapses with its lease
                await _index(self.rows.release, key, holder)

    async def advance(self, api: MlflowApi, name: str, alias: str, version: str) -> str:
        """Move `alias` of `name` to `version` unless a newer version holds it; what was done (the tag's value)."""
        try:
            async with self._claimed(name, alias), asyncio.timeout(CLAIM_SECONDS * 0.9):  # never past the lease
                return await _moved(api, name, alias, version)
        except TimeoutError:
            raise AliasNotNow(f"moving the alias {alias!r} of {name!r} outlasted its claim ({CLAIM_SECONDS:.0f} s)") from None


async def _index(call: Callable[..., T], *args: Any) -> T:
    """A call of the index's claims, in a worker thread; AliasNotNow if the index does not answer."""
    try:
        return await anyio.to_thread.run_sync(call, *args)
    except StorageUnavailable as error:
        raise AliasNotNow(f"the index holding the alias's claims does not answer: {error.detail}") from None


async def _moved(api: MlflowApi, name: str, alias: str, version: str) -> str:
    """The read and the move, under the claim."""
    try:
        held = str((await api.version_by_alias(name, alias)).get("version", ""))
    except MlflowRefused as error:
        if not _no_alias(error):
            raise
        held = ""  # no version holds it
    if held == version:
        return "already here"
    if held and _number(held) > _number(version):
        return f"kept on version {held} (newer)"
    await api.set_alias(name, alias, version)
    return f"moved here (from version {held})" if held else "moved here (no version held it)"
