"""The storage backends by name (`--store-backend`), and the store they make.

Owns `open_store(settings)`: the `Store` over the backend the settings name.
A new backend is a module set implementing `service.store.interface` (as
`service.store.local` and `service.store.memory` do), its name in
`service.settings.STORE_BACKENDS` with any settings it needs, and one entry
here.
"""

from __future__ import annotations

from collections.abc import Callable

from service.settings import Settings
from service.store.interface import Content, Index
from service.store.local.content import LocalContent
from service.store.local.index import LocalIndex
from service.store.memory import MemoryContent, MemoryIndex
from service.store.model_store import Store
from service.store.work_area import WorkArea

Backend = Callable[[Settings, WorkArea], tuple[Content, Index]]


def _local(settings: Settings, work_area: WorkArea) -> tuple[Content, Index]:
    return LocalContent(settings.store, work_area), LocalIndex(settings.store)


def _memory(settings: Settings, work_area: WorkArea) -> tuple[Content, Index]:
    return MemoryContent(work_area), MemoryIndex()


BACKENDS: dict[str, Backend] = {"local": _local, "memory": _memory}


def open_store(settings: Settings) -> Store:
    """The store the settings describe (not opened yet: `Store.open`)."""
    work_area = WorkArea(settings.store / "tmp")  # the local work area, under --store for every backend
    content, index = BACKENDS[settings.store_backend](settings, work_area)
    return Store(
        content,
        index,
        work_area,
        settings.store_max_bytes,
        min_free=settings.store_min_free,
        max_import_bytes=settings.max_import_bytes,
        tenant_max_bytes=settings.tenant_max_bytes,
        tenant_max_models=settings.tenant_max_models,
    )
