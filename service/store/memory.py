"""The in-memory backend: content and index in dictionaries of one process.

Owns `MemoryContent` and `MemoryIndex`, the smallest implementations of the
storage interface (`service.store.interface`): the unit tests' store, and
the pattern a remote backend follows (content read into the backend at
install, a local copy made on demand for what needs a file: the catalogue,
a worker's second read, a tensor's bytes). Nothing survives the process and
nothing is shared between processes: `--store-backend memory` is for tests
and trials, never a fleet.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from service.errors import TensorSourceChanged, TensorSourceGone
from service.store.byte_source import ByteSource, FileSource
from service.store.eviction import TenantCaps, evictable_in_order
from service.store.files import MODEL_ID
from service.store.layout import ModelFolder
from service.store.records import SourceFile, StoredRecord, TenantRecord
from service.store.work_area import WorkArea

GRAPH_FILE = "graph.json"


class MemoryContent:
    on_local_disk = False  # in the process's memory

    def __init__(self, work_area: WorkArea) -> None:
        self.work_area = work_area  # local copies are made in its folder
        self.blobs: dict[str, dict[str, bytes]] = {}  # place (the model id) -> relative path -> bytes
        self.lock = threading.Lock()

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def check(self) -> None:
        pass

    def new_place(self, model_id: str) -> str:
        return model_id

    def prepare(self, place: str, work: ModelFolder) -> None:
        pass

    def install(self, place: str, work: ModelFolder) -> None:
        files = {}
        for folder, _, names in os.walk(work.root):
            for name in names:
                path = Path(folder) / name
                files[work.relative(path)] = path.read_bytes()
        with self.lock:
            self.blobs[place] = files

    def discard(self, place: str) -> None:
        pass

    def places(self) -> list[str]:
        return list(self.blobs)

    def remove(self, place: str) -> Callable[[], None] | None:
        with self.lock:
            if self.blobs.pop(place, None) is None:
                return None
        return lambda: self.forget(place)

    def has_graph(self, place: str) -> bool:
        return GRAPH_FILE in self.blobs.get(place, {})

    def add_graph(self, place: str, rendered: Path) -> None:
        self.blobs[place][GRAPH_FILE] = rendered.read_bytes()
        rendered.unlink()

    def summary(self, place: str) -> bytes:
        try:
            return self.blobs[place]["summary.json"]
        except KeyError:
            raise FileNotFoundError(place) from None

    def catalog(self, place: str) -> Path:
        if place not in self.blobs:
            raise FileNotFoundError(place)
        return self._copy(place).catalog

    def open_graph(self, place: str) -> int:
        return os.open(self._copy(place).graph, os.O_RDONLY | os.O_CLOEXEC)

    @contextlib.contextmanager
    def model_files(self, place: str) -> Iterator[ModelFolder]:
        yield self._copy(place)

    def forget(self, place: str) -> None:
        shutil.rmtree(self._copy_root(place), ignore_errors=True)

    def _copy_root(self, place: str) -> Path:
        if not MODEL_ID.fullmatch(place):
            raise KeyError(place)
        return self.work_area.folder / f"copy-{place}"

    def _copy(self, place: str) -> ModelFolder:
        """A local copy of the model's files, written on first use (and the graph once it has one)."""
        folder = ModelFolder(self._copy_root(place))
        for relative, data in self.blobs.get(place, {}).items():
            path = folder.root / relative
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        return folder

    def open_file(self, place: str, item: SourceFile) -> ByteSource:
        """The local copy of a stored file; the content is immutable, so its size is the check."""
        if item.path not in self.blobs.get(place, {}):
            raise TensorSourceGone("the file holding the tensor no longer exists; import the model again")
        fd = os.open(self._copy(place).root / item.path, os.O_RDONLY | os.O_CLOEXEC)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != item.size:
            os.close(fd)
            raise TensorSourceChanged("the file holding the tensor changed since the import; import the model again")
        return FileSource(fd)


class MemoryIndex:
    def __init__(self) -> None:
        self.records: dict[str, StoredRecord] = {}
        self.sizes: dict[str, int] = {}
        self.last_use: dict[str, int] = {}
        self.held: dict[str, dict[str, TenantRecord]] = {}  # tenant -> model id -> its record
        self.rendered: set[tuple[str, str]] = set()  # (tenant, model id)
        self.check_runs: dict[tuple[str, str], bytes] = {}  # (tenant, model id) -> its CheckRuns document
        self.uploads: dict[str, float] = {}  # place -> when its upload began (monotonic)
        self.lock = threading.RLock()

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def check(self) -> None:
        pass

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with self.lock:
            yield

    def has(self, model_id: str) -> bool:
        return model_id in self.records

    def record(self, model_id: str) -> StoredRecord | None:
        return self.records.get(model_id)

    def add_record(self, record: StoredRecord, size: int) -> None:
        self.records[record.id] = record
        self.sizes[record.id] = size
        self.touch(record.id)

    def replace_record(self, record: StoredRecord) -> None:
        self.records[record.id] = record

    def drop(self, model_id: str, size: int) -> None:
        self.records.pop(model_id, None)
        self.sizes.pop(model_id, None)
        self.last_use.pop(model_id, None)
        for models in self.held.values():
            models.pop(model_id, None)
        self.rendered = {(tenant, held) for tenant, held in self.rendered if held != model_id}
        self.check_runs = {key: runs for key, runs in self.check_runs.items() if key[1] != model_id}

    def size(self, model_id: str) -> int:
        return self.sizes.get(model_id, 0)

    def grow(self, model_id: str, added: int) -> None:
        self.sizes[model_id] = self.sizes.get(model_id, 0) + added

    def usage(self) -> int:
        return sum(self.sizes.values())

    def count(self) -> int:
        return len(self.records)

    def touch(self, model_id: str) -> None:
        if model_id in self.records:
            self.last_use[model_id] = time.monotonic_ns()

    def by_last_use(self) -> list[str]:
        return sorted(self.records, key=lambda model_id: self.last_use.get(model_id, 0))

    def places(self) -> set[str]:
        return {record.place or model_id for model_id, record in self.records.items()}

    def evictable(self, tenant: str, caps: TenantCaps, *, keep: str, wanted: int) -> list[tuple[str, int]]:
        return evictable_in_order(tenant, caps, keep, wanted, holders=self.holders, size=self.size, by_last_use=self.by_last_use)

    def tenant_usage(self, tenant: str) -> tuple[int, int]:
        stored = [model_id for model_id in self.held.get(tenant, {}) if model_id in self.records]
        return sum(self.sizes.get(model_id, 0) for model_id in stored), len(stored)

    def begin_upload(self, place: str) -> None:
        self.uploads[place] = time.monotonic()

    def end_upload(self, place: str) -> None:
        self.uploads.pop(place, None)

    def live_uploads(self, grace_seconds: float) -> set[str]:
        now = time.monotonic()
        return {place for place, began in self.uploads.items() if now - began < grace_seconds}

    def stale_uploads(self, grace_seconds: float) -> set[str]:
        now = time.monotonic()
        return {place for place, began in self.uploads.items() if now - began >= grace_seconds}

    def claim_upload(self, place: str) -> None:
        self.uploads[place] = -math.inf  # stale for any grace

    def upload_open(self, place: str) -> bool:
        return self.uploads.get(place, -math.inf) != -math.inf

    def tenant_key(self, tenant: str) -> str:
        return tenant

    def hold(self, owner: TenantRecord, model_id: str) -> bool:
        models = self.held.setdefault(owner.tenant, {})
        if model_id in models:
            return False
        models[model_id] = owner
        return True

    def holding(self, tenant: str, model_id: str) -> TenantRecord | None:
        return self.held.get(tenant, {}).get(model_id)

    def visible(self, tenant: str, model_id: str) -> bool:
        return self.holds(tenant, model_id) and self.has(model_id)

    def visible_record(self, tenant: str, model_id: str) -> StoredRecord | None:
        return self.record(model_id) if self.holds(tenant, model_id) else None

    def holds(self, tenant: str, model_id: str) -> bool:
        return model_id in self.held.get(tenant, {})

    def let_go(self, tenant: str, model_id: str) -> bool:
        self.rendered.discard((tenant, model_id))
        self.check_runs.pop((tenant, model_id), None)
        return self.held.get(tenant, {}).pop(model_id, None) is not None

    def held_by_anyone(self, model_id: str) -> bool:
        return any(model_id in models for models in self.held.values())

    def held_by(self, tenant: str) -> list[str]:
        return list(self.held.get(tenant, {}))

    def holders(self) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for tenant, models in self.held.items():
            for model_id in models:
                found.setdefault(model_id, set()).add(tenant)
        return found

    def newest(self, tenant: str, before: tuple[int, str] | None, limit: int) -> list[tuple[int, str]]:
        found = [(owner.created_ns, model_id) for model_id, owner in self.held.get(tenant, {}).items()]
        return sorted((item for item in found if before is None or item < before), reverse=True)[:limit]

    def graph_rendered(self, tenant: str, model_id: str) -> bool:
        return (tenant, model_id) in self.rendered

    def mark_graph_rendered(self, tenant: str, model_id: str) -> None:
        self.rendered.add((tenant, model_id))

    def checks(self, tenant: str, model_id: str) -> bytes | None:
        return self.check_runs.get((tenant, model_id))

    def keep_checks(self, tenant: str, model_id: str, document: bytes) -> bool:
        if not self.holds(tenant, model_id):
            return False
        self.check_runs[(tenant, model_id)] = document
        return True
