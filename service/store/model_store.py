"""The content-addressed store: imported models by id, on disk.

Layout under the store root (`ModelFolder` names each file; nobody else
writes a path into the store):
    models/<id>/record.json     the stored record (`service.store.records`): files and their identity
    models/<id>/summary.json    the bounded summary, served as is
    models/<id>/catalog.sqlite  the tensor catalogue (`service.store.catalog`)
    models/<id>/converted.bin   converted tensor bytes (typed fields, strings), one after another
    models/<id>/graph.json      the resolved graph, served as is; made on first request
    models/<id>/files/...       an uploaded model (model.onnx) and its external data (external/...)
    models/<id>/lru             its mtime is the model's last use; it holds the
                                bytes the model takes in the store (decimal)
    tenants/<T>/<id>.json       tenant T holds model <id> (`service.store.tenants`):
                                content is shared, visibility is per tenant
    tmp/<process>/...         work folders of one live service process
    tmp/<process>.lock        held (flock) while that process lives
    lock, usage               flock for commits and eviction; the byte total
                              (a cache: recomputed from the lru files at start)

Rules: a model folder appears whole or not at all (its files are written and
fsynced in a work folder, which is then renamed into models/); after that
nothing in it changes, but for `graph.json`, which is derived from the model,
added once (renamed in whole) when first asked for, and the `lru` file; eviction renames a folder out of models/ before deleting
it, so a reader sees a model whole or not at all (an open file stays readable).
Several service processes may share one store: commits, the byte total and
eviction are serialized by an exclusive flock on `lock`; each process owns only
its own tmp folder, and at start removes tmp folders whose owner's lock is free
(a process that crashed).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from service.store.files import MODEL_ID, fsync_dir, fsync_path, fsync_tree, is_full, tree_bytes, write_file_atomically
from service.store.records import SourceFile, StoredRecord
from service.store.tenants import TenantIndex, TenantRecord

log = logging.getLogger("service.store")


class StoreFullError(Exception):
    """The store cannot hold the model: its size cap, or its file system (full,
    or below the free-space floor with nothing left to evict)."""


class ImportTooLargeError(Exception):
    """One import would add more bytes to the store than it may."""


class TenantQuotaError(Exception):
    """The tenant's share of the store (`--tenant-max-bytes`, `--tenant-max-models`) is used up."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit  # the setting: tenant_max_bytes or tenant_max_models


def _beyond(cap: int, amount: int) -> bool:
    """`amount` passes a per-tenant cap (0: no cap)."""
    return cap > 0 and amount > cap


class ModelFolder:
    """The files of one model's folder, in the store or in a work folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.record = root / "record.json"
        self.summary = root / "summary.json"
        self.catalog = root / "catalog.sqlite"
        self.converted = root / "converted.bin"
        self.graph = root / "graph.json"
        self.files = root / "files"
        self.upload_model = self.files / "model.onnx"
        self.upload_external = self.files / "external"
        self.lru = root / "lru"

    def relative(self, path: Path) -> str:
        """`path` (inside this folder) as the record stores it."""
        return str(path.relative_to(self.root))


class Store:
    def __init__(
        self,
        root: Path,
        max_bytes: int,
        *,
        min_free: int = 0,
        max_import_bytes: int | None = None,
        tenant_max_bytes: int = 0,
        tenant_max_models: int = 0,
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.tenant_max_bytes = tenant_max_bytes  # 0: no per-tenant cap
        self.tenant_max_models = tenant_max_models
        self.min_free = min_free  # bytes kept free on the file system: eviction makes room, else 507
        self.max_import_bytes = max_import_bytes if max_import_bytes is not None else max_bytes
        self.tenants = TenantIndex(root / "tenants")
        self.models = root / "models"
        self.tmp = root / "tmp"
        self.process_id = uuid.uuid4().hex
        self.work_root = self.tmp / self.process_id
        self._process_lock_fd: int | None = None

    # --- life cycle

    def open(self) -> None:
        self.models.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.tenants.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.tmp / f"{self.process_id}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._process_lock_fd = fd
        self.work_root.mkdir()
        self.clean_crashed()
        with self.locked():
            self._write_usage(self._scan_usage())

    def close(self) -> None:
        shutil.rmtree(self.work_root, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            (self.tmp / f"{self.process_id}.lock").unlink()
        if self._process_lock_fd is not None:
            os.close(self._process_lock_fd)
            self._process_lock_fd = None

    def clean_crashed(self) -> None:
        """Remove the tmp folders of processes that are gone."""
        for lock_path in self.tmp.glob("*.lock"):
            owner = lock_path.stem
            if owner == self.process_id:
                continue
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue  # its owner is alive
            try:
                shutil.rmtree(self.tmp / owner, ignore_errors=True)
                lock_path.unlink(missing_ok=True)
                log.info("removed the temporary files of a stopped service process (%s)", owner)
            finally:
                os.close(fd)
        for entry in self.tmp.iterdir():  # folders whose lock file is gone
            if entry.is_dir() and not (self.tmp / f"{entry.name}.lock").exists():
                shutil.rmtree(entry, ignore_errors=True)

    def free_bytes(self) -> int:
        """Bytes an unprivileged writer may still use on the store's file system."""
        info = os.statvfs(self.root)
        return info.f_bavail * info.f_frsize

    def make_room(self, tenant: str, keep: str | None = None) -> bool:
        """Evict least recently used models (that `tenant` may evict) until the
        file system has `min_free` bytes free; False if it cannot."""
        if self.free_bytes() >= self.min_free:
            return True
        with self.locked():
            self._evict(keep=keep or "", tenant=tenant, free_wanted=self.min_free)
        return self.free_bytes() >= self.min_free

    def writable(self) -> bool:
        """A file can be written in the store (a full file system counts as
        writable: the free-space floor reports that, and stops at once when
        space returns)."""
        probe = self.work_root / f"probe-{uuid.uuid4().hex}"
        try:
            write_file_atomically(probe, b"ok")
            probe.unlink()
            return True
        except OSError as error:
            with contextlib.suppress(OSError):
                probe.unlink()
            return is_full(error)

    @contextlib.contextmanager
    def work_folder(self) -> Iterator[ModelFolder]:
        """A fresh folder for one request, laid out as a model's; removed on
        every path out (unless committed)."""
        folder = self.work_root / uuid.uuid4().hex
        folder.mkdir()
        try:
            yield ModelFolder(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def temporary_files(self) -> list[Path]:
        """Everything in this process's tmp folder (tests: nothing after a request)."""
        return sorted(self.work_root.rglob("*"))

    # --- locking and the byte total

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _scan_usage(self) -> int:
        return sum(self._size_of(folder) for folder in self.models.iterdir() if folder.is_dir())

    @staticmethod
    def _size_of(folder: Path) -> int:
        try:
            return int((folder / "lru").read_text())
        except (OSError, ValueError):
            return 0

    def usage(self) -> int:
        """Bytes the stored models take (the cached total)."""
        return self._read_usage()

    def _read_usage(self) -> int:
        try:
            return int((self.root / "usage").read_text())
        except (OSError, ValueError):
            return self._scan_usage()

    def _write_usage(self, total: int) -> None:
        """Best effort: the total is a cache, recomputed at start (a full file
        system must not fail a commit that is already done)."""
        try:
            write_file_atomically(self.root / "usage", str(max(0, total)).encode(), durable=False)
        except OSError as error:
            log.warning("could not write the store's byte total: %s", error.strerror)

    # --- models

    def folder(self, model_id: str) -> ModelFolder:
        if not MODEL_ID.fullmatch(model_id):
            raise KeyError(model_id)
        return ModelFolder(self.models / model_id)

    def has(self, model_id: str) -> bool:
        return MODEL_ID.fullmatch(model_id) is not None and (self.models / model_id / "record.json").is_file()

    def read_record(self, model_id: str) -> StoredRecord | None:
        """The record of a stored model, or None."""
        if not MODEL_ID.fullmatch(model_id):
            return None
        try:
            return StoredRecord.model_validate_json(ModelFolder(self.models / model_id).record.read_bytes())
        except FileNotFoundError:
            return None

    def touch(self, model_id: str) -> None:
        with contextlib.suppress(OSError, KeyError):
            os.utime(self.folder(model_id).lru)

    def list_models(self, tenant: str, before: tuple[int, str] | None, limit: int) -> list[tuple[int, str]]:
        """(when the tenant imported it, in ns; id) of up to `limit` of the
        tenant's models, newest first, older than `before`."""
        found = self.tenants.newest(tenant, before, limit)
        return [(recorded, model_id) for recorded, model_id in found if self.has(model_id)]

    def visible(self, tenant: str, model_id: str) -> bool:
        """The tenant holds the model (its own record) and its content is stored."""
        return self.tenants.holds(tenant, model_id) and self.has(model_id)

    def attach(self, owner: TenantRecord, model_id: str) -> bool:
        """Give a tenant its record of stored content; True if it is new for
        the tenant, False if it held it already. Raises KeyError if the content
        is gone (evicted meanwhile)."""
        with self.locked():
            if not self.has(model_id):
                raise KeyError(model_id)
            return self.tenants.add(owner, model_id)

    def release(self, tenant: str, model_id: str) -> bool:
        """The tenant's DELETE: its record goes, and the content when no other
        tenant holds it. False if the tenant did not hold the model."""
        with self.locked():
            if not self.tenants.remove(tenant, model_id):
                return False
            if self.tenants.held_by_anyone(model_id):
                return True
            trash = self._remove_content(model_id)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
        return True

    def commit(self, work: ModelFolder, model_id: str, record: StoredRecord, summary: bytes, owner: TenantRecord) -> bool:
        """Move the finished work folder into the store as `model_id` (unless
        that content is there already) and give `owner`'s tenant its record.
        True if the model is new for the tenant. A full file system is
        `StoreFullError`, as is a model over the store's cap."""
        try:
            return self._commit(work, model_id, record, summary, owner)
        except OSError as error:
            if is_full(error):
                raise StoreFullError("the store's file system is full") from None
            raise

    def _commit(self, work: ModelFolder, model_id: str, record: StoredRecord, summary: bytes, owner: TenantRecord) -> bool:
        work.record.write_bytes(record.model_dump_json().encode())
        work.summary.write_bytes(summary)
        size = tree_bytes(work.root)
        size += len(str(size + 20))
        work.lru.write_text(str(size))
        if size > self.max_import_bytes:
            raise ImportTooLargeError(f"the import would add {size} bytes to the store, more than the limit of {self.max_import_bytes}")
        if size > self.max_bytes:
            raise StoreFullError(f"the model takes {size} bytes, more than the store's cap of {self.max_bytes}")
        fsync_tree(work.root)
        target = self.models / model_id
        with self.locked():
            if not self.tenants.holds(owner.tenant, model_id):
                self._check_quota(owner.tenant, size, new_model=True)
            if not target.exists():
                os.rename(work.root, target)
                fsync_dir(self.models)
                self._write_usage(self._read_usage() + size)
            created = self.tenants.add(owner, model_id)
            self._evict(keep=model_id, tenant=owner.tenant, free_wanted=self.min_free)
        return created

    def tenant_usage(self, tenant: str) -> tuple[int, int]:
        """The bytes and the number of the stored models the tenant holds (a
        model shared by several tenants counts in full for each)."""
        folder = self.tenants.folder(tenant)
        if not folder.is_dir():
            return 0, 0
        with os.scandir(folder) as entries:
            held = [self.models / entry.name.removesuffix(".json") for entry in entries if entry.name.endswith(".json")]
        stored = [model for model in held if model.is_dir()]
        return sum(self._size_of(model) for model in stored), len(stored)

    def _check_quota(self, tenant: str, adding: int, new_model: bool) -> None:
        """TenantQuotaError if `adding` bytes (and a model, if `new_model`) would pass the tenant's caps (lock held)."""
        if not (self.tenant_max_bytes or self.tenant_max_models):
            return
        used, models = self.tenant_usage(tenant)
        if new_model and _beyond(self.tenant_max_models, models + 1):
            raise TenantQuotaError(f"the tenant holds {models} models, the most it may (--tenant-max-models)", "tenant_max_models")
        if _beyond(self.tenant_max_bytes, used + adding):
            raise TenantQuotaError(
                f"the tenant's models take {used} bytes; {adding} more would pass its cap of {self.tenant_max_bytes} (--tenant-max-bytes)",
                "tenant_max_bytes",
            )

    def refresh_sources(self, model_id: str, files: dict[str, SourceFile]) -> None:
        """The same content was imported again from the data root: record the
        identity its files have now (a touch or a copy changes it), so its
        tensors stay servable. Files in the store are never replaced."""
        with self.locked():
            record = self.read_record(model_id)
            if record is None:
                return
            changed = {
                key: item
                for key, item in files.items()
                if key in record.files and not record.files[key].in_store and record.files[key] != item
            }
            if changed:
                record.files.update(changed)
                write_file_atomically(self.folder(model_id).record, record.model_dump_json().encode())

    def add_graph(self, model_id: str, graph: Path, tenant: str) -> bool:
        """Install a graph document rendered for `tenant` in a stored model
        (once: a render made when the model has one already, for another
        tenant or by another replica, is dropped) and note that the tenant had
        it rendered. The bytes count as an import's, against
        `--max-import-bytes` and the tenant's quota. False if the model is
        gone meanwhile."""
        folder = self.folder(model_id)
        size = graph.stat().st_size
        if size > self.max_import_bytes:
            raise ImportTooLargeError(f"the graph would add {size} bytes to the store, more than the limit of {self.max_import_bytes}")
        fsync_path(str(graph))
        with self.locked():
            if not folder.record.is_file() or not self.tenants.holds(tenant, model_id):
                return False
            if not folder.graph.exists():
                self._check_quota(tenant, size, new_model=False)
                os.rename(graph, folder.graph)
                fsync_dir(folder.root)
                old = self._size_of(folder.root)
                write_file_atomically(folder.lru, str(old + size).encode())
                self._write_usage(self._read_usage() + size)
                self._evict(keep=model_id, tenant=tenant, free_wanted=self.min_free)
            self.tenants.mark_graph_rendered(tenant, model_id)
        return True

    def _evictable_by(self, tenant: str) -> Callable[[str], bool]:
        """Whether `tenant`'s need for room may evict a model (lock held)."""
        holders = self.tenants.holders()
        own = self.tenants.folder(tenant).name
        usage: dict[str, list[int]] = {}
        for model_id, holding in holders.items():
            size = self._size_of(self.models / model_id)
            for holder in holding:
                used = usage.setdefault(holder, [0, 0])
                used[0] += size
                used[1] += 1
        over = {
            holder
            for holder, (used, models) in usage.items()
            if _beyond(self.tenant_max_bytes, used) or _beyond(self.tenant_max_models, models)
        }
        return lambda model_id: all(holder == own or holder in over for holder in holders.get(model_id, ()))

    def _remove_content(self, model_id: str) -> Path | None:
        """Move a model's folder out of models/ (lock held); the trash to delete, or None."""
        folder = self.folder(model_id)
        size = self._size_of(folder.root)
        trash = self.work_root / f"deleted-{model_id}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(folder.root, trash)
        except FileNotFoundError:
            return None
        fsync_dir(self.models)
        self._write_usage(self._read_usage() - size)
        return trash

    def _evict(self, keep: str, tenant: str, free_wanted: int = 0) -> None:
        """Least recently used first, until the total is within the cap and the
        file system has `free_wanted` bytes free (lock held). Only models that
        `tenant` may evict: its own, those nobody holds, and those whose every
        holder is over its quota; never a model of another tenant within its quota."""
        total = self._read_usage()

        def enough() -> bool:
            return total <= self.max_bytes and (free_wanted == 0 or self.free_bytes() >= free_wanted)

        if enough():
            return
        evictable = self._evictable_by(tenant)
        candidates = []
        for folder in self.models.iterdir():
            if folder.name == keep or not folder.is_dir() or not evictable(folder.name):
                continue
            try:
                used = (folder / "lru").stat().st_mtime_ns
            except OSError:
                used = 0
            candidates.append((used, folder))
        for _, folder in sorted(candidates):
            if enough():
                break
            size = self._size_of(folder)
            trash = self.work_root / f"evicted-{folder.name}-{uuid.uuid4().hex[:8]}"
            try:
                os.rename(folder, trash)
            except OSError:
                continue
            shutil.rmtree(trash, ignore_errors=True)
            self.tenants.forget(folder.name)
            total -= size
            log.info("evicted model %s (%d bytes) from the store", folder.name, size)
        fsync_dir(self.models)
        self._write_usage(total)
