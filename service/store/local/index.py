"""The index of the local store: small files beside the content.

Owns `LocalIndex` (`service.store.interface.Index`): a model's record
(`models/<id>/record.json`) and its size and last use (`models/<id>/lru`:
its text the bytes, its mtime the last use), the byte total (`usage`, a
cache recounted at start), the tenants' records (`tenants`,
`TenantFolders`) and the lock (an exclusive flock on `lock`, so several
processes may share the store).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from service.memo import Memo
from service.store.eviction import TenantCaps, evictable_in_order
from service.store.files import MODEL_ID, write_file_atomically
from service.store.layout import ModelFolder
from service.store.local.tenants import TenantFolders
from service.store.records import StoredRecord, TenantRecord

log = logging.getLogger("service.store")
RECORDS_CACHED = 4096  # parsed records kept (each a few hundred bytes)


class LocalIndex:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.models = root / "models"
        self.models_text = str(self.models)
        self.tenants = TenantFolders(root / "tenants")
        self.records: Memo[tuple[str, int, int, int], StoredRecord] = Memo(RECORDS_CACHED)  # (model id, its file's version) -> record

    def open(self) -> None:
        self.models.mkdir(parents=True, exist_ok=True)
        self.tenants.root.mkdir(parents=True, exist_ok=True)
        with self.locked():
            self._write_usage(self._scan_usage())

    def close(self) -> None:
        pass

    def check(self) -> None:
        pass  # a local folder: the readiness probe writes to it

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    # --- records, sizes, last use

    def _folder(self, model_id: str) -> ModelFolder:
        if not MODEL_ID.fullmatch(model_id):
            raise KeyError(model_id)
        return ModelFolder(self.models / model_id)

    def has(self, model_id: str) -> bool:
        return MODEL_ID.fullmatch(model_id) is not None and (self.models / model_id / "record.json").is_file()

    def record(self, model_id: str) -> StoredRecord | None:
        """The model's record; parsed once per version of its file (a read of
        a record seen before costs an open and an fstat). Do not change it:
        `replace_record` a copy."""
        if not MODEL_ID.fullmatch(model_id):
            return None
        try:
            fd = os.open(f"{self.models_text}/{model_id}/record.json", os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            info = os.fstat(fd)
            version = (model_id, info.st_ino, info.st_mtime_ns, info.st_size)
            return self.records.get(version, lambda: StoredRecord.model_validate_json(os.read(fd, info.st_size + 1)))
        finally:
            os.close(fd)

    def add_record(self, record: StoredRecord, size: int) -> None:
        folder = self._folder(record.id)
        write_file_atomically(folder.lru, str(size).encode())
        write_file_atomically(folder.record, record.model_dump_json().encode())
        self._write_usage(self.usage() + size)

    def replace_record(self, record: StoredRecord) -> None:
        write_file_atomically(self._folder(record.id).record, record.model_dump_json().encode())

    def drop(self, model_id: str, size: int) -> None:
        self.tenants.forget(model_id)
        self._write_usage(self.usage() - size)

    def size(self, model_id: str) -> int:
        try:
            return int(self._folder(model_id).lru.read_text())
        except (OSError, ValueError, KeyError):
            return 0

    def grow(self, model_id: str, added: int) -> None:
        write_file_atomically(self._folder(model_id).lru, str(self.size(model_id) + added).encode())
        self._write_usage(self.usage() + added)

    def usage(self) -> int:
        try:
            return int((self.root / "usage").read_text())
        except (OSError, ValueError):
            return self._scan_usage()

    def count(self) -> int:
        return sum(1 for entry in os.scandir(self.models) if entry.is_dir())

    def touch(self, model_id: str) -> None:
        with contextlib.suppress(OSError, KeyError):
            os.utime(self._folder(model_id).lru)

    def by_last_use(self) -> list[str]:
        used = []
        for folder in self.models.iterdir():
            if not folder.is_dir():
                continue
            try:
                last = (folder / "lru").stat().st_mtime_ns
            except OSError:
                last = 0
            used.append((last, folder.name))
        return [model_id for _, model_id in sorted(used)]

    def places(self) -> set[str]:
        return {folder.name for folder in self.models.iterdir() if (folder / "record.json").is_file()}

    def evictable(self, tenant: str, caps: TenantCaps, *, keep: str, wanted: int) -> list[tuple[str, int]]:
        own = self.tenant_key(tenant)
        return evictable_in_order(own, caps, keep, wanted, holders=self.holders, size=self.size, by_last_use=self.by_last_use)

    def tenant_usage(self, tenant: str) -> tuple[int, int]:
        stored = [model_id for model_id in self.held_by(tenant) if self.has(model_id)]
        return sum(self.size(model_id) for model_id in stored), len(stored)

    # A local content is installed by a rename under the lock, and removed by a
    # rename to the work area's trash: nothing is ever in flight in the store's folder.
    def begin_upload(self, place: str) -> None:
        pass

    def end_upload(self, place: str) -> None:
        pass

    def live_uploads(self, grace_seconds: float) -> set[str]:
        return set()

    def stale_uploads(self, grace_seconds: float) -> set[str]:
        return set()

    def claim_upload(self, place: str) -> None:
        pass

    def upload_open(self, place: str) -> bool:
        return True

    def _scan_usage(self) -> int:
        return sum(self.size(folder.name) for folder in self.models.iterdir() if folder.is_dir())

    def _write_usage(self, total: int) -> None:
        """Best effort: the total is a cache, recomputed at start (a full file
        system must not fail a commit that is already done)."""
        try:
            write_file_atomically(self.root / "usage", str(max(0, total)).encode(), durable=False)
        except OSError as error:
            log.warning("could not write the store's byte total: %s", error.strerror)

    # --- tenants (`TenantFolders`)

    def tenant_key(self, tenant: str) -> str:
        return self.tenants.folder(tenant).name

    def hold(self, owner: TenantRecord, model_id: str) -> bool:
        return self.tenants.add(owner, model_id)

    def holding(self, tenant: str, model_id: str) -> TenantRecord | None:
        return self.tenants.get(tenant, model_id)

    def visible(self, tenant: str, model_id: str) -> bool:
        return self.holds(tenant, model_id) and self.has(model_id)

    def visible_record(self, tenant: str, model_id: str) -> StoredRecord | None:
        return self.record(model_id) if self.holds(tenant, model_id) else None

    def holds(self, tenant: str, model_id: str) -> bool:
        return self.tenants.holds(tenant, model_id)

    def let_go(self, tenant: str, model_id: str) -> bool:
        return self.tenants.remove(tenant, model_id)

    def checks(self, tenant: str, model_id: str) -> bytes | None:
        return self.tenants.checks(tenant, model_id)

    def keep_checks(self, tenant: str, model_id: str, document: bytes) -> bool:
        return self.tenants.keep_checks(tenant, model_id, document)

    def held_by_anyone(self, model_id: str) -> bool:
        return self.tenants.held_by_anyone(model_id)

    def held_by(self, tenant: str) -> list[str]:
        return self.tenants.held_by(tenant)

    def holders(self) -> dict[str, set[str]]:
        return self.tenants.holders()

    def newest(self, tenant: str, before: tuple[int, str] | None, limit: int) -> list[tuple[int, str]]:
        return self.tenants.newest(tenant, before, limit)

    def graph_rendered(self, tenant: str, model_id: str) -> bool:
        return self.tenants.graph_rendered(tenant, model_id)

    def mark_graph_rendered(self, tenant: str, model_id: str) -> None:
        self.tenants.mark_graph_rendered(tenant, model_id)
