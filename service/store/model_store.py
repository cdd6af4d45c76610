"""The store's policy over any backend: what may be stored, by whom, and
what goes when room is needed.

Owns `Store`, the one object the rest of the service reaches the store
through. It composes a `Content` (`service.store.content`: each model's
files on any `Blobs`), the SQL index (`service.store.sql.index.SqlIndex`)
and the local `WorkArea`. Its use cases: `commit`, `release`, `add_graph`,
`open_tensor` (a tensor's record, catalogue row and bytes, read
consistently: see below), `summary_for` (the summary, the tenant's own
check runs and its record of the model, one call), `listing` (a page of
the tenant's models with theirs, one query) and a tenant's check runs
(`checks`, `update_checks`, read-change-write under the index's lock), its
latest attestation of it (`attestation`, `keep_attestation`) and
the name and label it gave a model (`rename`, under the same lock); the
lookups the routes make besides are single reads of the index (`visible`,
`visible_record`, `holding`, ...); the MLflow gate's rows are
`registry_rows`. It keeps, whatever the backend:

- a commit (`commit`) stores a finished work folder under its content id
  unless that content is stored already, and gives the caller's tenant its
  record; content is shared, visibility is per tenant;
- caps: `--max-import-bytes` per import (`ImportTooLarge`), the store's size
  cap and its free-space floor (`StoreFull`, after eviction), the tenant's
  bytes and models (`TenantQuotaExceeded`), and the share of the store's room
  a tenant's open resumable uploads may reserve (`check_reservation`:
  `--tenant-max-reserved`);
- eviction, least recently used first, takes only what the tenant needing
  room may evict: its own models, those nobody holds, and those whose every
  holder is over its quota; never a model of another tenant within its quota.
  It is planned before anything goes, from the sizes in the index: a commit
  evicts only what the bytes it holds need (the floor, and the cap as far as
  the tenant may evict), and a request refused (507) has evicted nothing.
  Before an import whose size is not known yet (`floor_reachable`) and at an
  upload's creation, nothing is evicted;
- a DELETE (`release`) drops the tenant's record, and the content once no
  tenant holds it;
- content is put at a place of its own (`Content.new_place`), before the
  index's lock is taken, and is stored once its record names that place; a
  commit that loses the race for the same content discards its own;
- a read of a tensor (`open_tensor`) races removals and re-imports, on
  another replica too: a catalogue gone after its record was read
  (`CatalogUnavailable`) is looked up again from the record read anew (the
  same id imported again is another copy at a place of its own), and so is
  a stored file gone or changed (`TensorSourceGone`, `TensorSourceChanged`)
  when the record then names another copy; a model gone meanwhile is
  NotFound, never a stale or a damaged read;
- content no record names (a commit cut short, a removal's deletion cut
  short: their process killed) is removed by `collect_garbage`, found by the
  marks the index keeps of content in flight (`SqlIndex.begin_upload`), older
  than a grace period: at start and by `python -m service gc`, neither of
  which lists the store; `gc --full` also lists every place the content has
  (for object storage, every object) and removes what no record names, but
  a commit still within its grace period. A local folder's start does the
  full collection (a directory listing: it also finds what a store of a
  release before the marks left).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from service.errors import (
    ImportTooLarge,
    NotFound,
    StorageUnavailable,
    StoreFull,
    TenantQuotaExceeded,
    TensorSourceChanged,
    TensorSourceGone,
    bounded,
)
from service.store.byte_source import ByteSource
from service.store.catalog import Catalog, CatalogUnavailable, OpenCatalogs
from service.store.content import Content
from service.store.data_root import DataRoot
from service.store.eviction import TenantCaps
from service.store.files import fsync_path, tree_bytes
from service.store.layout import ModelFolder
from service.store.records import SourceFile, StoredRecord, TenantRecord
from service.store.sql.index import SqlIndex
from service.store.sql.registry_rows import RegistryRows
from service.store.work_area import WorkArea
from service.tasks.catalog_format import TensorRow

log = logging.getLogger("service.store")
# Content in flight (a commit's upload, a removal's deletion) is garbage once
# it began this long ago unrecorded: its process died (or an import is that slow).
START_GRACE_SECONDS = 3600.0
TOUCH_SECONDS = 0.05
TOUCHES_KEPT = 100_000


def _beyond(cap: int, amount: int) -> bool:
    """`amount` passes a per-tenant cap (0: no cap)."""
    return cap > 0 and amount > cap


Removal = tuple[str, Callable[[], None]]  # a removed place, and the call that frees its bytes
GONE = "the model was removed from the store meanwhile"
TensorBytes = tuple[Callable[[], ByteSource], SourceFile]  # what opens a tensor's file (checked: the one recorded), and the file's record


class TenantView(NamedTuple):
    """A stored model as one tenant sees it (`Store.summary_for`)."""

    summary: bytes  # the stored summary
    runs: bytes | None  # the tenant's own check runs (None: it has none)
    holding: TenantRecord | None  # the tenant's record of it (None if it let it go meanwhile)


class Listed(NamedTuple):
    """One of a tenant's models in a listing (`Store.listing`)."""

    created_ns: int  # when the tenant took it
    model_id: str
    record: StoredRecord
    holding: TenantRecord
    runs: bytes | None


@dataclass(frozen=True, slots=True)
class OpenedTensor:
    """A tensor found for a tenant (`Store.open_tensor`)."""

    record: StoredRecord  # its model's record, as read
    row: TensorRow  # its catalogue row
    source: TensorBytes | None  # its bytes; None when it has none (no file, or no length)


class Store:
    def __init__(
        self,
        content: Content,
        index: SqlIndex,
        work_area: WorkArea,
        max_bytes: int,
        *,
        min_free: int = 0,
        max_import_bytes: int | None = None,
        tenant_max_bytes: int = 0,
        tenant_max_models: int = 0,
        tenant_max_reserved: float = 1.0,
        local_reads: bool = True,
    ) -> None:
        self.content = content
        self.index = index
        self.work_area = work_area
        self.max_bytes = max_bytes
        self.min_free = min_free  # bytes kept free on the local file system: eviction makes room, else 507
        self.max_import_bytes = max_import_bytes if max_import_bytes is not None else max_bytes
        self.tenant_max_bytes = tenant_max_bytes  # 0: no per-tenant cap
        self.tenant_max_models = tenant_max_models
        self.tenant_max_reserved = tenant_max_reserved  # the share of `room()` one tenant's open uploads may declare
        # The index and the content answer from this machine's files or memory,
        # in microseconds: a read's lookups may run on the event loop (a thread
        # hop would cost more); else (PostgreSQL, object storage) in a thread.
        self.local_reads = local_reads
        self.catalogs = OpenCatalogs()  # kept open: a connection costs more than a lookup
        self.touched: dict[str, tuple[float, int]] = {}  # model id -> when this process last wrote its use, and which write
        self.uses_written = 0  # uses (touches, new records) this process has written, in order

    # --- life cycle and the work area

    def open(self) -> None:
        """Ready the storage and collect the garbage the index knows of; a
        local folder's content is listed too (`collect_garbage`). Object
        storage is never listed here: a start costs the same at any size."""
        self.open_storage()
        self.collect_garbage(START_GRACE_SECONDS, full=self.content.on_local_disk)

    def open_storage(self) -> None:
        """Ready the work area, the content and the index (no garbage collection)."""
        self.work_area.open()
        self.content.open()
        self.index.open()

    def close(self) -> None:
        self.work_area.close()
        self.content.close()
        self.index.close()

    def collect_garbage(self, grace_seconds: float, *, full: bool = False) -> list[str]:
        """Remove content no record names: what a commit or a removal cut
        short left (its process killed, say), as the index's marks of content
        in flight `grace_seconds` old or more show it; with `full`, also every
        place the content lists that no record names and no mark younger than
        `grace_seconds` keeps (what no mark tells of: a store of an older
        version, a mark lost). The places removed.

        What it takes it claims under the lock (`SqlIndex.claim_upload`): a commit
        slower than the grace then refuses to record it. The listing comes
        before the marks are read: a commit whose content it lists marked its
        place before, so the marks read next keep it."""
        listed = self.content.places() if full else []
        with self.index.locked():
            stale = self.index.stale_uploads(grace_seconds)
            orphans = sorted(place for place in stale if not self._recorded(place))
            if full:
                kept = self.index.places() | self.index.live_uploads(grace_seconds) | set(orphans)
                orphans += [place for place in listed if place not in kept]
            for place in stale.difference(orphans):
                self.index.end_upload(place)  # a commit recorded, its process killed before it ended its mark
            for place in orphans:
                self.index.claim_upload(place)
            removals = [(place, self.content.remove(place)) for place in orphans]
        self._free(removals, "removed the unrecorded content of an interrupted commit or removal (%s)")  # ends their marks
        return orphans

    def _recorded(self, place: str) -> bool:
        """A record names `place` (a place is its model's id, or "id/generation")."""
        record = self.index.record(place.partition("/")[0])
        return record is not None and (record.place or record.id) == place

    def check(self) -> None:
        """StorageUnavailable if the content or the index cannot be reached now."""
        self.content.check()
        self.index.check()

    @contextmanager
    def work_folder(self) -> Iterator[ModelFolder]:
        with self.work_area.work_folder() as folder:
            yield folder

    def writable(self) -> bool:
        return self.work_area.writable()

    def free_bytes(self) -> int:
        return self.work_area.free_bytes()

    def room(self, uploads_held: int = 0) -> int:
        """The bytes the store may use above its free-space floor: the file
        system's free bytes, and what the store holds there already (the
        `uploads_held` bytes of open uploads; the models, if their content is
        on this disk), less the floor; at most the store's cap."""
        held = uploads_held + (self.index.usage() if self.content.on_local_disk else 0)
        return max(0, min(self.max_bytes, self.free_bytes() + held - self.min_free))

    def floor_reachable(self, tenant: str) -> bool:
        """Before an import whose size is not known yet (a body still to
        receive, a worker still to write): the file system is above its
        free-space floor, or evicting what `tenant` may evict would bring it
        back there (content on this disk). Nothing is evicted here: the commit
        evicts what the bytes it then holds need, or is refused evicting nothing."""
        short = self.min_free - self.free_bytes()
        if short <= 0:
            return True
        if not self.content.on_local_disk:
            return False  # content elsewhere: evicting it frees nothing here
        with self.index.locked():
            return sum(size for _, size in self.index.evictable(tenant, self.caps, keep="", wanted=short)) >= short

    def check_reservation(self, length: int, *, awaited: int, held: int, tenant_declared: int) -> None:
        """A new resumable upload of `length` bytes may be created, beside open
        uploads that still await `awaited` bytes and hold `held`, the tenant's
        declaring `tenant_declared`. TenantQuotaExceeded past the tenant's share
        of `room()` (`--tenant-max-reserved`), StoreFull first unless the file
        system has the bytes above its floor now. Never evicts: a reservation is not
        room used, and lasts --upload-expiry."""
        left = self.free_bytes() - self.min_free - awaited
        if left < length:
            raise StoreFull(
                f"the store has {max(0, left)} bytes free above its free-space floor (--store-min-free) beside the {awaited} "
                f"bytes open uploads still await, fewer than {length}; creating an upload evicts no model"
            )
        room = self.room(held)
        share = int(room * self.tenant_max_reserved)
        if tenant_declared + length > share:
            raise TenantQuotaExceeded(
                f"the tenant's open uploads declare {tenant_declared} bytes; {length} more would pass its share of the store's "
                f"room, {share} bytes ({self.tenant_max_reserved:g} of {room}: --tenant-max-reserved)",
                limit="tenant_max_reserved",
            )

    # --- reading

    def has(self, model_id: str) -> bool:
        return self.index.has(model_id)

    def visible(self, tenant: str, model_id: str) -> bool:
        """The tenant holds the model (its own record) and its content is stored."""
        return self.index.visible(tenant, model_id)

    def visible_record(self, tenant: str, model_id: str) -> StoredRecord | None:
        """The model's record, if the tenant holds it and it is stored."""
        return self.index.visible_record(tenant, model_id)

    def read_record(self, model_id: str) -> StoredRecord | None:
        return self.index.record(model_id)

    def holding(self, tenant: str, model_id: str) -> TenantRecord | None:
        """The tenant's record of the model (the name and label it gave it), or None."""
        return self.index.holding(tenant, model_id)

    def rename(self, tenant: str, model_id: str, name: str | None, label: str | None) -> bool:
        """The tenant's record of the model takes `name` and `label`, each where
        not None; False if the tenant does not hold the model."""
        with self.index.locked():
            return self.index.rename(tenant, model_id, name, label)

    def checks(self, tenant: str, model_id: str) -> bytes | None:
        """The tenant's own check runs of the model (`service.checks.runs`), None if it has none."""
        return self.index.checks(tenant, model_id)

    def shared_secret(self, name: str) -> str:
        """The secret `name` every process and replica of the service shares, made once (the index's `shared_secret`)."""
        return self.index.shared_secret(name)

    def keep_checks(self, tenant: str, model_id: str, document: bytes) -> bool:
        """Replace the tenant's check runs of the model; False if it no longer holds it."""
        with self.index.locked():
            return self.index.keep_checks(tenant, model_id, document)

    def update_checks(self, tenant: str, model_id: str, change: Callable[[bytes | None], bytes]) -> bytes | None:
        """The tenant's check runs of the model replaced by `change(its runs now)`,
        read and written under the index's lock (two imports of the same model by
        one tenant keep both their stages); the runs kept, None if the tenant no
        longer holds the model."""
        with self.index.locked():
            if not self.index.holds(tenant, model_id):
                return None
            document = change(self.index.checks(tenant, model_id))
            return document if self.index.keep_checks(tenant, model_id, document) else None

    def attestation(self, tenant: str, model_id: str) -> bytes | None:
        """The tenant's latest attestation of the model (a Sigstore bundle's JSON, `service.attestation`), None if none."""
        return self.index.attestation(tenant, model_id)

    def keep_attestation(self, tenant: str, model_id: str, bundle: bytes) -> bool:
        """Replace the tenant's attestation of the model; False if it no longer holds it (a single row's update)."""
        return self.index.keep_attestation(tenant, model_id, bundle)

    def summary_for(self, tenant: str, model_id: str) -> TenantView:
        """What a tenant's view of a stored model is made of: the stored summary,
        the tenant's own check runs and its record of the model; the model is
        marked used. NotFound if the model went meanwhile (evicted, removed)."""
        try:
            summary = self.summary(model_id)
        except FileNotFoundError:
            raise NotFound("the model was evicted from the store meanwhile; post it again") from None
        held = self.index.holding(tenant, model_id)
        runs = self.index.checks(tenant, model_id)
        self.touch(model_id)
        return TenantView(summary, runs, held)

    def listing(self, tenant: str, before: tuple[int, str] | None, limit: int) -> list[Listed]:
        """Up to `limit` of the tenant's stored models, newest first (when it
        took each, in ns, and the id, older than `before`), each with its
        record, the tenant's record of it and its check runs: one query."""
        return [Listed(*row) for row in self.index.listing(tenant, before, limit)]

    def graph_rendered(self, tenant: str, model_id: str) -> bool:
        return self.index.graph_rendered(tenant, model_id)

    def list_models(self, tenant: str, before: tuple[int, str] | None, limit: int) -> list[tuple[int, str]]:
        """(when the tenant imported it, in ns; id) of up to `limit` of the
        tenant's models, newest first, older than `before`."""
        return [(recorded, model_id) for recorded, model_id in self.index.newest(tenant, before, limit) if self.index.has(model_id)]

    def _place(self, model_id: str) -> str:
        """Where the model's content is; FileNotFoundError if it is not stored."""
        record = self.index.record(model_id)
        if record is None:
            raise FileNotFoundError(model_id)
        return record.place or record.id

    def summary(self, model_id: str) -> bytes:
        return self.content.summary(self._place(model_id))

    @contextmanager
    def model_files(self, model_id: str) -> Iterator[ModelFolder]:
        """The model's uploaded files in a local folder, for a worker to read again."""
        with self.content.model_files(self._place(model_id)) as folder:
            yield folder

    def open_file(self, record: StoredRecord, item: SourceFile) -> ByteSource:
        return self.content.open_file(record.place or record.id, item)

    def open_graph(self, model_id: str) -> int:
        """An open descriptor of the model's graph document; FileNotFoundError if it has none (or is gone)."""
        return self.content.open_graph(self._place(model_id))

    def catalog(self, model_id: str, tenant: str, record: StoredRecord | None = None) -> Catalog:
        """The model's tensor catalogue, opened for this tenant (`OpenCatalogs`);
        CatalogUnavailable if the model is gone. `record`: the model's, read already."""
        try:
            place = record.place or record.id if record is not None else self._place(model_id)
            return self.catalogs.get(place, tenant, lambda: self.content.catalog(place))
        except FileNotFoundError:
            raise CatalogUnavailable(model_id) from None

    def open_tensor(self, tenant: str, model_id: str, find: Callable[[Catalog], TensorRow], data_root: DataRoot) -> OpenedTensor:
        """The tensor `find` picks in the tenant's model's catalogue (it raises
        what a lookup that finds none or too many answers), its record and
        what opens its bytes (a stored file, or the data root's): consistent
        whatever removes or imports the model again meanwhile (the module
        comment). NotFound if the tenant does not hold the model, or it went.
        The model is marked used."""
        record = self.index.visible_record(tenant, model_id)
        if record is None:
            raise NotFound(f"no model {bounded(repr(model_id), 80)}")
        try:
            row = find(self.catalog(model_id, tenant, record))
        except CatalogUnavailable:  # removed since its record was read; or imported again meanwhile (a new place): that copy
            record = self.index.visible_record(tenant, model_id)
            if record is None:
                raise NotFound(GONE) from None
            try:
                row = find(self.catalog(model_id, tenant, record))
            except CatalogUnavailable:
                raise NotFound(GONE) from None
        self.touch(model_id)
        if row.file is None or not row.length:
            return OpenedTensor(record, row, None)
        key, read = row.file, record
        item = read.files.get(key)
        if item is None:
            raise RuntimeError("the model's record does not name the file of this tensor")

        def open_bytes() -> ByteSource:
            if not item.in_store:
                return data_root.open(item)
            return self._open_stored(tenant, model_id, read, key)

        return OpenedTensor(record, row, (open_bytes, item))

    def _open_stored(self, tenant: str, model_id: str, record: StoredRecord, key: str) -> ByteSource:
        """The model's stored file `key`. If it is not the one `record` names
        (gone, or another copy), the model was removed since its record was
        read: NotFound; or, imported again meanwhile (the same id: the same
        bytes, a new copy), the file its record names now."""
        try:
            return self.open_file(record, record.files[key])
        except (TensorSourceGone, TensorSourceChanged):
            current = self.index.visible_record(tenant, model_id)
            if current == record:
                raise  # the stored file itself changed or went: the store was damaged
            if current is None or key not in current.files:
                raise NotFound(GONE) from None
            return self.open_file(current, current.files[key])

    def touch(self, model_id: str) -> None:
        """The model was used now. A burst of reads of one model costs a write
        every TOUCH_SECONDS, not one each: a touch is skipped when this process
        wrote the model's use that recently and wrote no other model's since
        (so the order of last use this process sees is never changed by it)."""
        now = time.monotonic()
        last = self.touched.get(model_id)
        if last is not None and last[1] == self.uses_written and now - last[0] < TOUCH_SECONDS:
            return
        self.index.touch(model_id)
        self.uses_written += 1
        self.touched[model_id] = (now, self.uses_written)
        if len(self.touched) > TOUCHES_KEPT:
            self.touched.clear()

    def usage(self) -> int:
        """Bytes the stored models take."""
        return self.index.usage()

    def model_count(self) -> int:
        return self.index.count()

    def registry_rows(self) -> RegistryRows:
        """The MLflow gate's delivery markers and claims, in the index every replica shares."""
        return self.index.registry_rows()

    def tenant_usage(self, tenant: str) -> tuple[int, int]:
        """The bytes and the number of the stored models the tenant holds (a
        model shared by several tenants counts in full for each)."""
        return self.index.tenant_usage(tenant)

    @property
    def caps(self) -> TenantCaps:
        return TenantCaps(self.tenant_max_bytes, self.tenant_max_models)

    # --- writing

    def commit(
        self,
        work: ModelFolder,
        model_id: str,
        record: StoredRecord,
        summary: bytes,
        owner: TenantRecord,
        *,
        checks: bytes = b"",
        uploaded: Callable[[], None] | None = None,
    ) -> bool:
        """Store the finished work folder as `model_id` (unless that content is
        stored already) and give `owner`'s tenant its record, with `checks` (the
        check runs of this import, `service.checks.runs`) as its own; `uploaded`
        is called once new content's bytes are stored, before its record. True if the model
        is new for the tenant. A model over the store's cap is `StoreFull`, as
        is one the file system cannot hold above its floor even once every
        model the tenant may evict is gone (then nothing is evicted); a full
        file system, the OSError (the problem map answers 507)."""
        work.summary.write_bytes(summary)
        size = tree_bytes(work.root) + len(record.model_dump_json().encode())
        size += len(str(size + 20))  # and the size itself, as the file index before the SQL one wrote it
        if size > self.max_import_bytes:
            raise ImportTooLarge(f"the import would add {size} bytes to the store, more than the limit of {self.max_import_bytes}")
        if size > self.max_bytes:
            raise StoreFull(f"the model takes {size} bytes, more than the store's cap of {self.max_bytes}")
        place = self.content.new_place(model_id)
        self.index.begin_upload(place)
        installed, taken, evicted = False, False, []
        try:
            self.content.prepare(place, work)
            if uploaded is not None:
                uploaded()
            with self.index.locked():
                if not self.index.holds(owner.tenant, model_id):
                    self._check_quota(owner.tenant, size, new_model=True)
                stored = self.index.has(model_id)
                taken = not stored and not self.index.upload_open(place)
                if taken:  # its objects are being deleted: recorded, the model would be lost
                    raise StorageUnavailable(
                        "the import's content was taken as garbage while it was stored (a gc with a grace shorter than "
                        "the upload took it); post it again"
                    )
                evicting = self._eviction_plan(owner.tenant, keep=model_id, adding=0 if stored else size)
                if not stored:
                    self.index.add_record(record.model_copy(update={"place": place}), size)
                    self.uses_written += 1
                    installed = True
                created = self.index.hold(owner, model_id)
                if checks:
                    self.index.keep_checks(owner.tenant, model_id, checks)
                evicted = self._evict(evicting)
        finally:
            if not installed:
                self.content.discard(place)
            if not taken:
                self.index.end_upload(place)  # a taken place's mark is garbage collection's to end
        self._free(evicted, "evicted a model's content from the store (%s)")
        return created

    def release(self, tenant: str, model_id: str) -> bool:
        """The tenant's DELETE: its record goes, and the content when no other
        tenant holds it. False if the tenant did not hold the model."""
        removed: list[Removal] = []
        with self.index.locked():
            if not self.index.let_go(tenant, model_id):
                return False
            record = self.index.record(model_id)
            if record is not None and not self.index.held_by_anyone(model_id):
                removed = [self._remove(model_id, record.place or record.id)]
        self._free(removed, "removed a model no tenant holds (%s)")
        return True

    def refresh_sources(self, model_id: str, files: dict[str, SourceFile]) -> None:
        """The same content was imported again from the data root: record the
        identity its files have now (a touch or a copy changes it), so its
        tensors stay servable. Files in the store are never replaced."""
        with self.index.locked():
            record = self.index.record(model_id)
            if record is None:
                return
            changed = {
                key: item
                for key, item in files.items()
                if key in record.files and not record.files[key].in_store and record.files[key] != item
            }
            if changed:
                self.index.replace_record(record.model_copy(update={"files": {**record.files, **changed}}))

    def add_graph(self, model_id: str, graph: Path, tenant: str) -> bool:
        """Install a graph document rendered for `tenant` in a stored model
        (once: a render made when the model has one already, for another
        tenant or by another replica, is dropped) and note that the tenant had
        it rendered. The bytes count as an import's, against
        `--max-import-bytes` and the tenant's quota. False if the model is
        gone meanwhile."""
        size = graph.stat().st_size
        if size > self.max_import_bytes:
            raise ImportTooLarge(f"the graph would add {size} bytes to the store, more than the limit of {self.max_import_bytes}")
        fsync_path(str(graph))
        evicted: list[Removal] = []
        with self.index.locked():
            if not self.index.has(model_id) or not self.index.holds(tenant, model_id):
                return False
            place = self._place(model_id)
            if not self.content.has_graph(place):
                self._check_quota(tenant, size, new_model=False)
                evicting = self._eviction_plan(tenant, keep=model_id, adding=size)
                self.content.add_graph(place, graph)
                self.index.grow(model_id, size)
                evicted = self._evict(evicting)
            self.index.mark_graph_rendered(tenant, model_id)
        self._free(evicted, "evicted a model's content from the store (%s)")
        return True

    # --- caps and eviction (the index's lock held)

    def _check_quota(self, tenant: str, adding: int, new_model: bool) -> None:
        """TenantQuotaExceeded if `adding` bytes (and a model, if `new_model`) would pass the tenant's caps."""
        if not (self.tenant_max_bytes or self.tenant_max_models):
            return
        used, models = self.tenant_usage(tenant)
        if new_model and _beyond(self.tenant_max_models, models + 1):
            raise TenantQuotaExceeded(f"the tenant holds {models} models, the most it may (--tenant-max-models)", limit="tenant_max_models")
        if _beyond(self.tenant_max_bytes, used + adding):
            raise TenantQuotaExceeded(
                f"the tenant's models take {used} bytes; {adding} more would pass its cap of {self.tenant_max_bytes} (--tenant-max-bytes)",
                limit="tenant_max_bytes",
            )

    def _eviction_plan(self, tenant: str, keep: str, adding: int) -> list[str]:
        """What must go before the store takes `adding` more bytes whose files
        are on the work area's file system already, least recently used first
        among what `tenant` may evict (never `keep`; `SqlIndex.evictable`), by the
        sizes in the index: enough for the file system to have `min_free` bytes
        free (content on this disk), and, as far as it goes, for the total to
        be within the cap. StoreFull, with nothing evicted, if all of it would
        not make the floor."""
        free_short = self.min_free - self.free_bytes() if self.content.on_local_disk else 0
        wanted = max(free_short, self.index.usage() + adding - self.max_bytes)
        if wanted <= 0:
            return []
        plan = self.index.evictable(tenant, self.caps, keep=keep, wanted=wanted)
        freed = sum(size for _, size in plan)
        if freed < free_short:
            raise StoreFull(
                f"the store's file system has {self.free_bytes()} bytes free, below its floor of {self.min_free} "
                f"(--store-min-free), and evicting every model this tenant may evict ({freed} bytes) would not make room; "
                "nothing was evicted"
            )
        return [model_id for model_id, _ in plan]

    def _evict(self, plan: list[str]) -> list[Removal]:
        """Drop the models of a plan (`_eviction_plan`) from the index; their
        bytes are freed after the lock (`_free`)."""
        removed = []
        for model_id in plan:
            record = self.index.record(model_id)
            if record is not None:  # else gone meanwhile (a DELETE)
                removed.append(self._remove(model_id, record.place or record.id))
        return removed

    def _remove(self, model_id: str, place: str) -> Removal:
        """The model is dropped from the index and its content made
        unreachable (lock held), marked in flight until its bytes are freed
        (`_free`): a process killed between leaves garbage the index knows of."""
        size = self.index.size(model_id)
        self.index.begin_upload(place)
        finish = self.content.remove(place)
        self.index.drop(model_id, size)
        log.info("dropped model %s (%d bytes) from the store", model_id, size)
        return place, finish

    def _free(self, removed: list[Removal], done: str) -> None:
        """Free the bytes of removed places (outside the lock), drop their local
        copies and end their marks of content in flight. The change is done
        already: storage that does not answer now leaves the mark, and garbage
        collection frees the bytes once it is older than its grace."""
        for place, finish in removed:
            try:
                finish()
                self.content.forget(place)
                self.index.end_upload(place)
            except StorageUnavailable as error:
                log.warning("the removed content at %s is left to garbage collection: %s", place, error)
                continue
            log.info(done, place)
        if removed:
            self.catalogs.sweep()  # closes the removed catalogues this process held open: their space is freed
