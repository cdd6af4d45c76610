"""An upload's model part, checked while the rest of its body arrives: `ModelPartCheck`.

Owns the early answer to a model refused by its own bytes (docs/http-api.md,
"Refused early"). Once an upload's model part is on disk (`model_read`,
called from the thread that wrote it) and more than `MIN_REST_BYTES` of its
body are still to come (or an unknown number: a chunked body), a sandboxed
worker reads that part alone (`Staging.list_externals`: the worker task
"externals", in a worker slot taken in its turn like any other, fair
between tenants, from outside the import queue: a body still arriving never
holds an import place) while the loop goes on receiving (`receiving`). A
refusal of the model's content (malformed, a tensor too large, an external
location outside the rules, too many external files: an `ImportFailed`
with the importer's kind, offset and field path), or the `BadInput` the
check itself raises on what it learnt (a part no tensor uses), ends the
reception at once and is the upload's answer; the HTTP layer then answers and closes the
connection without reading the rest. Anything else the check meets (a
worker that crashed, a resource limit, an I/O error) is left to the import, which reads the
model again with its external data, and so is a body that ends before the
check does (the check's worker is ended). A body whose rest is small is
not checked apart: its import starts as soon anyway. The front end never
reads the model's bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from service.errors import BadInput, ImportFailed
from service.imports.sources.finished_uploads import NOT_THE_CONTENTS_FAULT

log = logging.getLogger("service")
T = TypeVar("T")
MIN_REST_BYTES = 4 << 20  # a body with no more than this left after its model part is not checked apart
LEFT_TO_THE_IMPORT = NOT_THE_CONTENTS_FAULT | {"ResourceLimit"}  # the import's worker may be given more than the check's


def refused_by_its_bytes(error: ImportFailed) -> bool:
    """The importer refused the model for what its bytes say (not a worker's limit, crash or I/O): so will its import."""
    return error.limit is None and error.failure.kind not in LEFT_TO_THE_IMPORT


class ModelPartCheck:
    """The early check of one upload's model part (see the module comment); `check` runs the worker."""

    def __init__(self, check: Callable[[], Awaitable[object]]) -> None:
        self._check = check
        self._loop = asyncio.get_running_loop()
        self._model_read = asyncio.Event()
        self._refusal: ImportFailed | BadInput | None = None

    def model_read(self) -> None:
        """The model part is on disk, its file closed (called from the thread that wrote it)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody receives any more
            self._loop.call_soon_threadsafe(self._model_read.set)

    async def receiving(self, receive: Callable[[], Awaitable[T]], rest: Callable[[], int | None]) -> T:
        """`await receive()`, the model part checked meanwhile once it is read while `rest()` (the bytes of the
        body still to come; None: unknown) is more than MIN_REST_BYTES; the check's refusal is raised instead,
        `receive` cancelled."""
        received: list[T] = []
        with anyio.CancelScope() as scope:
            checking = asyncio.create_task(self._checking(scope, rest), name="model-part-check")
            try:
                received.append(await receive())
            finally:
                checking.cancel()  # the body ended first: the import decides
                with anyio.CancelScope(shield=True):
                    await asyncio.wait([checking])
        if self._refusal is not None:
            raise self._refusal
        return received[0]

    async def _checking(self, scope: anyio.CancelScope, rest: Callable[[], int | None]) -> None:
        await self._model_read.wait()
        left = rest()
        if left is not None and left <= MIN_REST_BYTES:
            return
        try:
            await self._check()
        except BadInput as error:  # the check's own verdict on what was received (a part the model does not use)
            self._refusal = error
            scope.cancel()
        except ImportFailed as error:
            if refused_by_its_bytes(error):
                self._refusal = error
                scope.cancel()
                return
            log.info("the early check of an upload's model part ended without a verdict (%s); its import decides", error.failure.kind)
        except Exception as error:  # the import reads the model again and answers for it
            log.info("the early check of an upload's model part ended without a verdict (%s); its import decides", type(error).__name__)
