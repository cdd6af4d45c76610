"""The service's parts: `Service`, set up by the app's lifespan.

Owns `Service` (settings, store, sandbox, import limiter, API keys, metrics,
readiness, the data root, the graph renders under way in this process, the
resumable uploads in the making, the store's opening), `Service.imports`
(the part of them the import use cases are handed: `service.imports.parts`)
and `Service.read` (a store read on the event loop or in a thread, whichever
costs less). Nothing here knows the web
framework: the routes are handed it by `service.http.dependencies`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import anyio.to_thread

from service.access.keys import KeyRing
from service.imports.limiter import ImportLimiter
from service.imports.parts import ImportParts
from service.observability.metrics import Metrics
from service.observability.readiness import ReadinessProbe
from service.sandbox.supervisor import Sandbox
from service.settings import Settings
from service.store.backends import resumable_uploads_for
from service.store.data_root import DataRoot
from service.store.model_store import Store
from service.store.opening import StoreOpening
from service.store.uploads import ResumableUploads

T = TypeVar("T")


@dataclass
class Service:
    settings: Settings
    store: Store
    sandbox: Sandbox
    limiter: ImportLimiter
    keys: KeyRing
    metrics: Metrics
    readiness: ReadinessProbe
    data_root: DataRoot  # where server-side models are read from (--data-root: a folder or a bucket)
    graph_renders: dict[tuple[str, str], asyncio.Future[None]] = field(default_factory=dict)  # (model id, tenant)
    opening: StoreOpening = field(default_factory=StoreOpening.done)  # the store's opening, in the background for a remote store
    partial_uploads: ResumableUploads = field(init=False)  # resumable uploads (tus): this machine's or the fleet's (opened by the app)
    imports: ImportParts = field(init=False)  # what the import use cases are handed (the same parts)

    def __post_init__(self) -> None:
        self.partial_uploads = resumable_uploads_for(self.settings, self.store)
        self.imports = ImportParts(self.settings, self.store, self.sandbox, self.limiter, self.data_root, self.graph_renders)

    async def read(self, call: Callable[[], T]) -> T:
        """`call()` (a read of the store: index lookups, a catalogue query, a
        small file read) where it costs least: on the event loop when the
        store and the data root are on this machine (tens of microseconds,
        less than a thread hop), else in a worker thread (network round trips)."""
        if self.store.local_reads and self.data_root.local_reads:
            return call()
        return await anyio.to_thread.run_sync(call)
