"""Resumable uploads (tus 1.0, `/uploads`) of the fleet store: bytes as the store's objects, state in PostgreSQL.

Owns `FleetUploads` (`service.store.uploads.ResumableUploads`): an upload's
bytes are parts, each an object of the store's bytes (`Blobs`, the same
interface the models' content goes through) at
`uploads/<tenant key>/<id>/part-<number>` (beside the store's `models/`),
sent as they arrive; its parts (number, size) and offset are recorded in
the index's database (`service.store.postgres.uploads`). So any replica
continues, answers HEAD for, removes or imports any upload. Each tenant
sees only its own (kept by the index's tenant key): another's is missing to
it, as one that never existed.

A PATCH (`FleetAppending`) holds the upload's lease (taken without waiting:
a second writer is `UploadBusy`; a dead replica's lapses after
`LEASE_SECONDS`, then another takes it over, the part number moving on),
buffers the bytes in a file of the local work area, and puts a part each
time `PART_BYTES` are buffered, and the rest when it ends: a part may be of
any size, so nothing is held back between PATCHes. The offset HEAD gives
is what is recorded. What a replica killed mid-PATCH had buffered is lost,
and sent again by the client from that offset; a part it put but did not
record is named by no row, and goes with its upload.

`PART_BYTES` is 8 MiB: the bytes a killed replica loses, and the local
buffer a PATCH holds, stay small; a request per 8 MiB costs little against
S3's throughput.

An import (`link_into`) fetches the parts in order into the import's work
folder, hashing each while the next is fetched; `remove` (DELETE, after an import) and the
sweep of the expired (`--upload-expiry` after the last write; every replica
sweeps, which is safe: each step may run twice) delete the upload's objects,
then its row. Accounting is the local uploads' (`check_creation`), from
sums in SQL: the tenant's open uploads, their declared lengths, the bytes
all await (against this replica's free space: an import fetches them
here). Their bytes held are in the bucket, not on this disk: they add
nothing to the store's room.

The release before this one sent the parts as an S3 multipart upload (its
tables, `onnx_tus_*`, are left to its replicas during a rolling update):
an upload it began is not seen here, and its client starts again.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from service.errors import NotFound, StorageUnavailable, UploadBusy, UploadIncomplete, UploadOffsetMismatch, bounded
from service.settings import Settings
from service.store.model_store import Store
from service.store.postgres.index import PostgresIndex, tenant_key
from service.store.postgres.uploads import UploadRow, UploadRows
from service.store.uploads import UPLOAD_ID, DigestUpdate, UploadState, check_creation

log = logging.getLogger("service.store")

PART_BYTES = 8 << 20  # see the module comment
LEASE_SECONDS = 10.0  # a dead writer's lease lapses after this
RENEW_SECONDS = 2.0  # a live writer renews its lease this often while bytes arrive
HASH_CHUNK = 1 << 20
UPLOADS = "uploads/"


def _folder(key: str, upload_id: str) -> str:
    return f"{UPLOADS}{key}/{upload_id}/"


def _part(key: str, upload_id: str, number: int) -> str:
    return f"{_folder(key, upload_id)}part-{number:06d}"


def _hash_range(path: Path, start: int, length: int, digest: hashlib._Hash) -> None:
    """Feed `digest` the `length` bytes of the file at `start` (just written: in the file cache)."""
    with open(path, "rb") as written:
        written.seek(start)
        while length > 0:
            chunk = written.read(min(HASH_CHUNK, length))
            if not chunk:
                raise OSError(errno.EIO, f"{path.name} is shorter than the parts fetched into it")
            digest.update(chunk)
            length -= len(chunk)


def _not_found(upload_id: str) -> NotFound:
    return NotFound(f"no upload {bounded(repr(upload_id), 80)}")


class FleetUploads:
    def __init__(self, settings: Settings, store: Store) -> None:
        if not isinstance(store.index, PostgresIndex):
            raise TypeError("the fleet's uploads need the fleet store's index (--database)")
        self.store = store
        self.blobs = store.content.blobs
        self.expiry = settings.upload_expiry
        self.max_open = settings.max_open_uploads
        self.rows = UploadRows(store.index.database, settings.upload_expiry, LEASE_SECONDS)

    def open(self) -> None:
        self.sweep()

    # --- the protocol's operations

    def create(self, tenant: str, length: int, metadata: str, filename: str) -> UploadState:
        """A new empty upload of `length` bytes, as the local uploads' `create`
        (refusals by `check_creation`)."""
        key = tenant_key(tenant)
        upload_id = secrets.token_hex(16)
        with self.rows.creating():
            survey = self.rows.survey(key)
            check_creation(
                self.store, tenant, length, self.max_open,
                open_now=survey.tenant_open, declared=survey.tenant_declared, awaited=survey.awaited, held=0,
            )  # fmt: skip
            created = self.rows.insert(upload_id, key, length, metadata, filename, time.time_ns())
        return UploadState(upload_id, length, 0, metadata, filename, created + self.expiry)

    def _row(self, tenant: str, upload_id: str) -> UploadRow:
        """The tenant's live upload; NotFound if there is none (an expired one is removed, unless a PATCH holds it)."""
        if not UPLOAD_ID.fullmatch(upload_id):
            raise _not_found(upload_id)
        row = self.rows.get(tenant_key(tenant), upload_id)
        if row is None or (row.expired and self._remove_idle(row)):
            raise _not_found(upload_id)
        return row

    def find(self, tenant: str, upload_id: str) -> UploadState:
        row = self._row(tenant, upload_id)
        return UploadState(upload_id, row.length, row.offset, row.metadata, row.filename, row.last_write + self.expiry)

    def append(self, tenant: str, upload_id: str, offset: int) -> FleetAppending:
        """Hold the upload for one PATCH from `offset`: UploadBusy if another
        request (on any replica) holds it, UploadOffsetMismatch unless `offset`
        is the bytes it holds durably."""
        if not UPLOAD_ID.fullmatch(upload_id):
            raise _not_found(upload_id)
        token = secrets.token_hex(16)
        row = self.rows.take(tenant_key(tenant), upload_id, token)
        if row is None:
            self._row(tenant, upload_id)  # NotFound, or expired (then removed)
            raise UploadBusy(f"another request is writing upload {upload_id} now; once it ends, HEAD gives the offset to resume from")
        try:
            if row.offset != offset:
                raise UploadOffsetMismatch(
                    f"the upload holds {row.offset} bytes, not {offset}: PATCH from Upload-Offset: {row.offset}", row.offset
                )
            return FleetAppending(self, row, token)
        except BaseException:
            with contextlib.suppress(StorageUnavailable):
                self.rows.release(upload_id, token, touch=False)
            raise

    def remove(self, tenant: str, upload_id: str) -> bool:
        """Delete the upload's objects and its row; False if there was none
        (a PATCH writing it then fails: it records nothing more, and answers 404)."""
        if not UPLOAD_ID.fullmatch(upload_id):
            raise _not_found(upload_id)
        row = self.rows.get(tenant_key(tenant), upload_id)
        return row is not None and self._remove(row)

    def _remove(self, row: UploadRow) -> bool:
        """The objects first: should the storage not answer, the row stays for the sweep to try again."""
        self.blobs.delete(self.blobs.keys(_folder(row.tenant_key, row.upload_id)))
        return self.rows.delete(row.upload_id)

    def _remove_idle(self, row: UploadRow) -> bool:
        """Remove an expired upload unless a PATCH holds it; whether it is gone."""
        idle = self.rows.expired(row.upload_id)
        if idle:
            return self._remove(idle[0])
        return not self.rows.exists(row.upload_id)

    def link_into(self, tenant: str, upload_id: str, target: Path) -> tuple[int, str]:
        """The finished upload's recorded parts, in order, fetched to `target`;
        its size and SHA-256. NotFound (removed meanwhile), or UploadIncomplete."""
        row = self._row(tenant, upload_id)
        if row.offset != row.length:
            raise UploadIncomplete(
                f"upload {upload_id} holds {row.offset} of its {row.length} bytes: PATCH the rest first", upload_id, row.offset
            )
        target.touch(exist_ok=False)
        digest, size = hashlib.sha256(), 0
        with ThreadPoolExecutor(1) as hashing:  # each part hashed while the next is fetched (both let go of the GIL)
            hashed = []
            try:
                for number, part_size in self.rows.parts(upload_id):
                    self.blobs.fetch(_part(row.tenant_key, upload_id, number), target)
                    hashed.append(hashing.submit(_hash_range, target, size, part_size, digest))
                    size += part_size
            except FileNotFoundError:
                raise _not_found(upload_id) from None
            finally:
                for each in hashed:
                    each.result()
        written = target.stat().st_size
        if written != size or size != row.length:
            raise OSError(errno.EIO, f"upload {upload_id}'s parts hold {written} bytes, not the {row.length} it declared")
        return size, digest.hexdigest()

    def sweep(self) -> int:
        """Remove the expired uploads no PATCH holds; the number removed."""
        removed = 0
        for row in self.rows.expired(""):
            if self._remove(row):
                removed += 1
                log.info("removed an expired upload (%s)", row.upload_id)
        return removed

    def reserved(self) -> int:
        """Bytes the uploads still await."""
        return self.rows.survey("").awaited

    def collect_orphans(self) -> list[str]:
        """`gc --full`: remove the objects under `uploads/` of uploads no row
        names (a part a PATCH put while another replica removed its upload);
        their folders. Listed before the rows are read: an upload's row is
        written before its first object and deleted after its last, so a
        folder listed whose row is gone is garbage."""
        folders: dict[str, list[str]] = {}  # folder -> its keys
        upload_ids: dict[str, str] = {}  # folder -> the upload id it is named after
        for key in self.blobs.keys(UPLOADS):
            tenant, _, rest = key.removeprefix(UPLOADS).partition("/")
            upload_id = rest.partition("/")[0]
            if UPLOAD_ID.fullmatch(upload_id):
                folder = _folder(tenant, upload_id)
                folders.setdefault(folder, []).append(key)
                upload_ids[folder] = upload_id
        orphans = sorted(folder for folder, upload_id in upload_ids.items() if not self.rows.exists(upload_id))
        for folder in orphans:
            self.blobs.delete(folders[folder])
            log.info("removed the objects of an upload no row names (%s)", folder)
        return orphans


class FleetAppending:
    """One PATCH's hold on a fleet upload (`service.store.uploads.Appending`):
    its lease, and the bytes not yet put as a part in a file of the work area."""

    digest = None  # nobody hashes on the way: the import hashes what it fetched
    fd = None  # nothing to write back: the buffer goes to the store's objects

    def __init__(self, owner: FleetUploads, row: UploadRow, token: str) -> None:
        self.owner = owner
        self.blobs = owner.blobs
        self.rows = owner.rows
        self.row = row
        self.upload_id = row.upload_id
        self.token = token
        self.length = row.length
        self.offset = row.offset  # bytes consumed (recorded ones, then the buffer's)
        self.next_part = row.next_part
        self.consumed = 0  # bytes this PATCH consumed
        self.held = True  # the lease is this PATCH's (False once it was found taken over, or the upload removed)
        self.renewed = time.monotonic()
        self.buffer_path = owner.store.work_area.folder / f"upload-part-{token}"
        self.buffer: IO[bytes] = open(self.buffer_path, "wb")  # noqa: SIM115  # closed by _put_part and end()
        self.buffered = 0

    @property
    def room(self) -> int:
        return self.length - self.offset

    def consume(self, chunk: bytes, digest_update: DigestUpdate | None) -> None:
        """Buffer `chunk`, putting each `PART_BYTES` buffered as a part."""
        view = memoryview(chunk)
        while view:
            piece = view[: PART_BYTES - self.buffered]
            self.buffer.write(piece)
            self.buffered += len(piece)
            self.offset += len(piece)
            self.consumed += len(piece)
            view = view[len(piece) :]
            if self.buffered == PART_BYTES:
                self._put_part()
        if time.monotonic() - self.renewed > RENEW_SECONDS:
            if not self.rows.renew(self.upload_id, self.token):
                raise self._lost()
            self.renewed = time.monotonic()

    def _put_part(self) -> None:
        """The buffer as the next part, put (the file taken) and recorded; a new buffer."""
        self.buffer.close()
        key = _part(self.row.tenant_key, self.upload_id, self.next_part)
        self.blobs.put(key, self.buffer_path)
        if not self.rows.add_part(self.upload_id, self.token, self.next_part, self.buffered):
            with contextlib.suppress(StorageUnavailable):  # no row names it (its number is never used again); else gc --full's
                self.blobs.delete([key])
            raise self._lost()
        self.renewed = time.monotonic()
        self.next_part += 1
        self.buffer = open(self.buffer_path, "wb")  # noqa: SIM115
        self.buffered = 0

    def _lost(self) -> NotFound | UploadBusy:
        """The error of a write the lease no longer covers: the upload was taken over, or removed."""
        self.held = False
        if self.rows.exists(self.upload_id):
            return UploadBusy(f"upload {self.upload_id} was taken over by another request; HEAD gives the offset to resume from")
        return _not_found(self.upload_id)

    def end(self) -> float | None:
        """Keep what was consumed (the buffer as a last part), let go of the
        lease; the new expiry, or None if the upload was removed, or taken
        over (the error was raised already)."""
        try:
            if self.held and self.buffered:
                self._put_part()
            if not self.held:
                return None
            touch = self.consumed == 0 and self.offset < self.length  # a PATCH without bytes counts as activity
            last_write = self.rows.release(self.upload_id, self.token, touch=touch)
        except NotFound:
            return None
        except BaseException:
            with contextlib.suppress(StorageUnavailable):
                self.rows.release(self.upload_id, self.token, touch=False)
            raise
        finally:
            self.buffer.close()
            self.buffer_path.unlink(missing_ok=True)
        if last_write is None:
            lost = self._lost()
            if isinstance(lost, NotFound):
                return None
            raise lost
        return last_write + self.owner.expiry
