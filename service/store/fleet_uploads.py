"""Resumable uploads (tus 1.0, `/uploads`) of the fleet store: bytes in the bucket, state in PostgreSQL.

Owns `FleetUploads` (`service.store.uploads.ResumableUploads`), modelled on
tusd's S3 store: an upload is an S3 multipart upload of
`uploads/<tenant key>/<id>/data` (beside the store's `models/`), its bytes
sent as they arrive, part by part, its offset and parts (number, ETag, size)
recorded in the index's database (`service.store.postgres.uploads`). So any
replica continues, answers HEAD for, removes or imports any upload. Each
tenant sees only its own (kept by the index's tenant key): another's is
missing to it, as one that never existed.

A PATCH (`FleetAppending`) holds the upload's lease (taken without waiting:
a second writer is `UploadBusy`; a dead replica's lapses after
`LEASE_SECONDS`, then another takes it over), buffers the bytes in an
unnamed file of the local work area, and sends a part each time
`PART_BYTES` are buffered. Parts other than the last must be at least
5 MiB; the bytes a PATCH ends with, short of a part, go to an object of
their own, the "incomplete part" (`incomplete-<token>`, its size recorded),
fetched back and sent first by the next PATCH, or sent as the last part when
the upload is whole. The offset HEAD gives is what is durable: the recorded
parts and incomplete part. What a replica killed mid-PATCH had buffered is
lost, and sent again by the client from that offset.

`PART_BYTES` is 8 MiB (tusd prefers 50): the bytes a killed replica loses,
and the local buffer a PATCH holds, stay small; 10,000 parts still make
78 GiB, past `--max-upload-total`'s most useful sizes; a request per 8 MiB
costs little against S3's throughput.

An import (`link_into`) completes the multipart upload and fetches the
object into the import's work folder while hashing it; `remove` (DELETE,
after an import) and the sweep of the expired (`--upload-expiry` after the
last write; every replica sweeps, which is safe: each step may run twice)
abort the multipart upload and delete the upload's objects and row.
Accounting is the local uploads' (`check_creation`), from sums in SQL: the
tenant's open uploads, their declared lengths, the bytes all await (against
this replica's free space: an import fetches them here). Their bytes held
are in the bucket, not on this disk: they add nothing to the store's room.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.util
import logging
import secrets
import tempfile
import time
from pathlib import Path
from typing import IO

from service.errors import NotFound, StorageUnavailable, UploadBusy, UploadIncomplete, UploadOffsetMismatch, bounded
from service.setting_kinds import SettingsError
from service.settings import Settings
from service.store.model_store import Store
from service.store.postgres.index import PostgresIndex, tenant_key
from service.store.postgres.uploads import UploadRow, UploadRows
from service.store.s3.multipart import Multipart
from service.store.uploads import UPLOAD_ID, DigestUpdate, UploadState, check_creation

log = logging.getLogger("service.store")

PART_BYTES = 8 << 20  # see the module comment
LEASE_SECONDS = 10.0  # a dead writer's lease lapses after this
RENEW_SECONDS = 2.0  # a live writer renews its lease this often while bytes arrive
UPLOADS = "uploads/"


def _folder(key: str, upload_id: str) -> str:
    return f"{UPLOADS}{key}/{upload_id}/"


def _data(key: str, upload_id: str) -> str:
    return _folder(key, upload_id) + "data"


def _not_found(upload_id: str) -> NotFound:
    return NotFound(f"no upload {bounded(repr(upload_id), 80)}")


class FleetUploads:
    def __init__(self, settings: Settings, store: Store) -> None:
        if not isinstance(store.index, PostgresIndex) or settings.store_bucket is None:
            raise TypeError("the fleet's uploads need the fleet store (--store s3://... and --database)")
        if importlib.util.find_spec("boto3") is None:  # imported at the first call that needs the bucket: refused at start instead
            raise SettingsError(
                "--store s3://... with --database needs the fleet extra (boto3 is missing): pip install 'onnx-import-service[fleet]'"
            )
        self.store = store
        self.expiry = settings.upload_expiry
        self.max_open = settings.max_open_uploads
        self.rows = UploadRows(store.index.database, settings.upload_expiry, LEASE_SECONDS)
        self.objects = Multipart(*settings.store_bucket)

    def open(self) -> None:
        """The sweep (boto3 is imported at the first call that needs the bucket: a replica
        nobody sends a resumable upload to never imports it)."""
        self.sweep()

    # --- the protocol's operations

    def create(self, tenant: str, length: int, metadata: str, filename: str) -> UploadState:
        """A new empty upload of `length` bytes, as the local uploads' `create`
        (refusals by `check_creation`); its multipart upload begins with its first part."""
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
        """Abort the upload's multipart upload, delete its objects and its row; False if there was none
        (a PATCH writing it then fails: it records nothing more, and answers 404)."""
        if not UPLOAD_ID.fullmatch(upload_id):
            raise _not_found(upload_id)
        row = self.rows.get(tenant_key(tenant), upload_id)
        return row is not None and self._remove(row)

    def _remove(self, row: UploadRow) -> bool:
        """The objects first: should the storage not answer, the row stays for the sweep to try again."""
        if row.multipart_id:
            self.objects.abort(_data(row.tenant_key, row.upload_id), row.multipart_id)
        self.objects.delete_all(_folder(row.tenant_key, row.upload_id))
        return self.rows.delete(row.upload_id)

    def _remove_idle(self, row: UploadRow) -> bool:
        """Remove an expired upload unless a PATCH holds it; whether it is gone."""
        idle = self.rows.expired(row.upload_id)
        if idle:
            return self._remove(idle[0])
        return not self.rows.exists(row.upload_id)

    def link_into(self, tenant: str, upload_id: str, target: Path) -> tuple[int, str]:
        """Complete the finished upload's multipart upload and fetch the object
        to `target` while hashing it; its size and SHA-256. NotFound, or UploadIncomplete."""
        row = self._row(tenant, upload_id)
        if row.offset != row.length:
            raise UploadIncomplete(
                f"upload {upload_id} holds {row.offset} of its {row.length} bytes: PATCH the rest first", upload_id, row.offset
            )
        digest = hashlib.sha256()
        if row.length == 0:
            target.touch(exist_ok=False)
            return 0, digest.hexdigest()
        data = _data(row.tenant_key, upload_id)
        if not row.completed:
            parts = [(number, etag) for number, etag, _ in self.rows.parts(upload_id)]
            with contextlib.suppress(FileNotFoundError):  # completed by another import at once (else the fetch finds no object)
                self.objects.complete(data, row.multipart_id, parts)
            self.rows.mark_completed(upload_id)
        with open(target, "xb") as out:
            try:
                size = self.objects.fetch(data, out, digest)
            except FileNotFoundError:
                raise _not_found(upload_id) from None
        if size != row.length:
            raise OSError(errno.EIO, f"upload {upload_id} holds {size} bytes in the bucket, not its {row.length}")
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
        """`gc --full`: remove the objects and multipart uploads under `uploads/`
        of uploads no row names (an incomplete part a PATCH put while another
        replica removed its upload); their folders. Listed before the rows are
        read: an upload's row is written before its first object and deleted
        after its last, so a folder listed whose row is gone is garbage."""
        listed = set(self.objects.keys(UPLOADS)) | {key for key, _ in self.objects.uploads(UPLOADS)}
        folders = {}  # folder -> the upload id it is named after
        for key in listed:
            tenant, _, rest = key.removeprefix(UPLOADS).partition("/")
            upload_id = rest.partition("/")[0]
            if UPLOAD_ID.fullmatch(upload_id):
                folders[_folder(tenant, upload_id)] = upload_id
        orphans = sorted(folder for folder, upload_id in folders.items() if not self.rows.exists(upload_id))
        for folder in orphans:
            for key, multipart_id in self.objects.uploads(folder):
                self.objects.abort(key, multipart_id)
            self.objects.delete_all(folder)
            log.info("removed the objects of an upload no row names (%s)", folder)
        return orphans


class FleetAppending:
    """One PATCH's hold on a fleet upload (`service.store.uploads.Appending`):
    its lease, and the bytes not yet sent as a part in an unnamed local file."""

    digest = None  # nobody hashes on the way: the import hashes as it fetches
    fd = None  # nothing to write back: the buffer goes to the bucket

    def __init__(self, owner: FleetUploads, row: UploadRow, token: str) -> None:
        self.owner = owner
        self.objects = owner.objects
        self.rows = owner.rows
        self.row = row
        self.upload_id = row.upload_id
        self.token = token
        self.length = row.length
        self.offset = row.offset  # bytes consumed (durable ones, then the buffer's)
        self.data = _data(row.tenant_key, row.upload_id)
        self.multipart_id = row.multipart_id
        self.next_part = row.next_part
        self.incomplete_key = row.incomplete_key
        self.consumed = 0  # bytes this PATCH consumed
        self.held = True  # the lease is this PATCH's (False once it was found taken over, or the upload removed)
        self.pending = False  # the buffer holds bytes not yet recorded
        self.renewed = time.monotonic()
        self.buffer: IO[bytes] = tempfile.TemporaryFile(dir=owner.store.work_area.folder)  # noqa: SIM115  # closed by end()
        self.buffered = 0
        try:
            if row.incomplete and row.offset < row.length:
                self.buffered = self.objects.fetch(row.incomplete_key, self.buffer)
                if self.buffered != row.incomplete:
                    raise StorageUnavailable(f"the incomplete part of upload {row.upload_id} is not the one recorded; try again")
        except FileNotFoundError:
            self.buffer.close()
            raise _not_found(row.upload_id) from None  # removed meanwhile (its objects go first)
        except BaseException:
            self.buffer.close()
            raise

    @property
    def room(self) -> int:
        return self.length - self.offset

    def consume(self, chunk: bytes, digest_update: DigestUpdate | None) -> None:
        """Buffer `chunk`, sending each `PART_BYTES` buffered as a part (parts of one size, as tusd's)."""
        view = memoryview(chunk)
        while view:
            piece = view[: PART_BYTES - self.buffered]
            self.buffer.write(piece)
            self.buffered += len(piece)
            self.offset += len(piece)
            self.consumed += len(piece)
            self.pending = True
            view = view[len(piece) :]
            if self.buffered == PART_BYTES:
                self._send_part()
        if time.monotonic() - self.renewed > RENEW_SECONDS:
            if not self.rows.renew(self.upload_id, self.token):
                raise self._lost()
            self.renewed = time.monotonic()

    def _send_part(self) -> None:
        """The buffer as the next part, recorded; the incomplete part it took in is deleted."""
        if not self.multipart_id:
            self.multipart_id = self.objects.create(self.data)
            if not self.rows.set_multipart(self.upload_id, self.token, self.multipart_id):
                self.objects.abort(self.data, self.multipart_id)
                raise self._lost()
        self.buffer.flush()
        self.buffer.seek(0)
        try:
            etag = self.objects.upload_part(self.data, self.multipart_id, self.next_part, self.buffer, self.buffered)
        except FileNotFoundError:
            raise self._lost() from None  # aborted: removed meanwhile
        if not self.rows.add_part(self.upload_id, self.token, self.next_part, etag, self.buffered):
            raise self._lost()
        self.renewed = time.monotonic()
        self.next_part += 1
        self._forget_incomplete()
        self.buffer.seek(0)
        self.buffer.truncate()
        self.buffered = 0
        self.pending = False

    def _keep_incomplete(self) -> None:
        """The buffer as the incomplete part: an object of this PATCH's own, then recorded."""
        key = f"{_folder(self.row.tenant_key, self.upload_id)}incomplete-{self.token}"
        self.buffer.flush()
        self.buffer.seek(0)
        self.objects.put(key, self.buffer, self.buffered)
        if not self.rows.set_incomplete(self.upload_id, self.token, self.buffered, key):
            with contextlib.suppress(StorageUnavailable):
                self.objects.delete_all(key)
            raise self._lost()
        self._forget_incomplete()
        self.incomplete_key = key
        self.pending = False

    def _forget_incomplete(self) -> None:
        """Delete the incomplete part the index no longer names (left if the storage fails: removed with the upload)."""
        old, self.incomplete_key = self.incomplete_key, ""
        if old:
            with contextlib.suppress(StorageUnavailable):
                self.objects.delete_all(old)

    def _lost(self) -> NotFound | UploadBusy:
        """The error of a write the lease no longer covers: the upload was taken over, or removed."""
        self.held = False
        if self.rows.exists(self.upload_id):
            return UploadBusy(f"upload {self.upload_id} was taken over by another request; HEAD gives the offset to resume from")
        return _not_found(self.upload_id)

    def end(self) -> float | None:
        """Keep what was consumed (the last part if the upload is whole, else the
        incomplete part), let go of the lease; the new expiry, or None if the
        upload was removed, or taken over (the error was raised already)."""
        try:
            if self.held and self.pending and self.buffered:
                if self.offset == self.length:
                    self._send_part()
                else:
                    self._keep_incomplete()
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
        if last_write is None:
            lost = self._lost()
            if isinstance(lost, NotFound):
                return None
            raise lost
        return last_write + self.owner.expiry
