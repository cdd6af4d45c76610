"""What the import use cases need of the service, and nothing more.

Owns `ImportParts`: the settings, the store, the sandbox, the fair
admission (`service.imports.admission`), the data root, the links to
reports (`service.imports.report_links`), the attester that signs each
check run's verdict (`service.attestation`; none without `--signing-key`), what is added at
the pipeline's steps (`ImportSteps`; nothing in the service) and the graph
renders under way in this process. Also `read`, which runs a read of the
store where it costs least. The app builds one
(`service.api.state.Service.imports`); the routes hand it to the pipeline
(`service.imports.pipeline`) and the other use cases, and the registry's gate, which
never see the rest of the service (its API keys, metrics, readiness, uploads
in the making) or the web framework.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import anyio.to_thread

from service.imports.admission import Admission
from service.imports.report_links import ReportLinks
from service.sandbox.supervisor import Sandbox
from service.settings import Settings
from service.store.data_root import DataRoot
from service.store.model_store import Store

if TYPE_CHECKING:
    from service.attestation.attester import Attester

T = TypeVar("T")


class ImportSteps:
    """What an app may add at the pipeline's steps (`create_app(steps=...)`),
    each awaited there; the service adds nothing. These do nothing."""

    async def before_commit(self, model_id: str) -> None:
        """The worker has answered and the content's id is known; nothing of it is stored yet."""

    async def content_uploaded(self, model_id: str) -> None:
        """New content's bytes are in the store and its record is not yet (`Store.commit`'s `uploaded`)."""


@dataclass(frozen=True)
class ImportParts:
    settings: Settings
    store: Store
    sandbox: Sandbox
    admission: Admission
    data_root: DataRoot  # where server-side models are read from (--data-root: a folder or a bucket)
    links: ReportLinks  # the capability links to a tenant's reports, made (the registry's tags) and opened (/links/TOKEN)
    steps: ImportSteps | None = None  # awaited at the pipeline's steps (None: nothing added)
    attester: Attester | None = None  # signs each check run's attestation (--signing-key; None: none signed)
    graph_renders: dict[tuple[str, str], asyncio.Future[Any]] = field(default_factory=dict)  # (model id, tenant)

    async def read(self, call: Callable[[], T]) -> T:
        """`call()` (a read of the store: index lookups, a catalogue query, a
        small file read) where it costs least: on the event loop when the
        store and the data root are on this machine (tens of microseconds,
        less than a thread hop), else in a worker thread (network round trips)."""
        if self.store.local_reads and self.data_root.local_reads:
            return call()
        return await anyio.to_thread.run_sync(call)
