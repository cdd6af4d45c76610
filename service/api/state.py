"""The service's parts: `Service`, set up by the app's lifespan.

Owns `Service`: the parts the import use cases are handed (`imports`,
`service.imports.parts.ImportParts`: settings, store, sandbox, import
admission, data root, graph renders under way in this process; all but the
renders also properties of their own names), the comparisons of two models
(`service.imports.diffs.Diffs`), and what only the HTTP layer uses (API keys,
metrics, readiness, the resumable uploads in the making, the store's
opening). Nothing here knows the web framework: the routes are handed it
by `service.api.dependencies`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from service.access.keys import KeyRing
from service.imports.admission import Admission
from service.imports.diffs import Diffs
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


@dataclass
class Service:
    imports: ImportParts  # settings, store, sandbox, admission, data root, graph renders: what the use cases are handed
    diffs: Diffs  # the comparisons of two models a tenant asked for: kept, and under way
    keys: KeyRing
    metrics: Metrics
    readiness: ReadinessProbe
    opening: StoreOpening = field(default_factory=StoreOpening.done)  # the store's opening, in the background for a remote store
    partial_uploads: ResumableUploads = field(init=False)  # resumable uploads (tus) in the making, in the store (opened by the app)

    def __post_init__(self) -> None:
        self.partial_uploads = resumable_uploads_for(self.settings, self.store)

    # The parts the routes use as often as the use cases do, by their own names.
    @property
    def settings(self) -> Settings:
        return self.imports.settings

    @property
    def store(self) -> Store:
        return self.imports.store

    @property
    def sandbox(self) -> Sandbox:
        return self.imports.sandbox

    @property
    def admission(self) -> Admission:
        return self.imports.admission

    @property
    def data_root(self) -> DataRoot:
        return self.imports.data_root
