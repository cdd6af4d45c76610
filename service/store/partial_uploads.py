"""Resumable uploads in the making (tus 1.0, `/uploads`), on this machine's disk.

Owns `PartialUploads`: create an upload of a declared length (counted
against the tenant's `--max-open-uploads`, its declared lengths against its
share of the store's room, `--tenant-max-reserved`, its missing bytes reserved
against the store's free-space floor; a creation never evicts), look one up, append to one (`Appending`: one
writer at a time), link a finished one into an import's work folder, remove
one, and the sweep of the expired (`--upload-expiry` after the last write).
The layout, under `<local root>/uploads/` (beside the work area, on the same
file system, so a finished upload is hard-linked, never copied, into a work
folder):

    lock                  flock: creations one at a time (the tenant's count, the space reserved)
    <T>/<id>/upload.json  the declared length and the Upload-Metadata as sent (written once, atomically)
    <T>/<id>/data         the bytes received, in order: its size is the offset,
                          its mtime the last write (the expiry counts from it)
    <T>/.<id>.new-<hex>   an upload being created (renamed to <id> once whole)
    <T>/.gone-<hex>       an upload being removed (renamed away first: nobody sees half of one)

where <T> is the tenant's folder name (the index's key of the tenant, `service.store.sql.index.tenant_key`):
a tenant looks only in its own folder, so another tenant's upload is missing
to it in the same way, and at the same cost, as one that never existed.
Every state is on disk, so any front-end process serves any request of any
upload; a PATCH holds an flock on the upload's `data` (taken without waiting:
a second writer is `UploadBusy`). The one state a process keeps is a cache
of SHA-256 digests of the bytes its own PATCHes wrote, used at import when it
covers the whole upload (else the file is hashed from disk).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

from service.errors import (
    NotFound,
    UploadBusy,
    UploadIncomplete,
    UploadOffsetMismatch,
    bounded,
)
from service.store.files import fsync_dir, write_file_atomically
from service.store.model_store import Store
from service.store.sql.index import tenant_key
from service.store.uploads import UPLOAD_ID, DigestUpdate, UploadState, check_creation

log = logging.getLogger("service.store")

RECORD_FILE = "upload.json"
DATA_FILE = "data"
LOCK_FILE = "lock"
LEFTOVER_SECONDS = 60.0  # a half-made upload (its creation cut short) older than this is removed by the sweep
DIGESTS_KEPT = 10_000
HASH_CHUNK = 1 << 20

ChunkWrite = Callable[[int, bytes], None]  # (the data file's descriptor, a chunk): append it, and hash it


class UploadRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    length: int
    metadata: str  # Upload-Metadata as the client sent it (checked: ASCII keys, base64 values)
    filename: str  # its `filename`, decoded ("" without one)
    created_ns: int


class Survey(NamedTuple):
    """The open uploads, as a creation counts them."""

    awaited: int  # bytes every upload still awaits (reserved: they count against the store's free space)
    held: int  # bytes every upload holds (on the file system already)
    tenant_open: int  # uploads of one tenant
    tenant_declared: int  # their declared lengths


def chunk_writer(digest_update: DigestUpdate | None) -> ChunkWrite:
    """Append a chunk to the descriptor (opened with O_APPEND), and feed the
    digest (`digest_update`: a hash object's update, or a thread's hashing
    it) exactly the bytes written (a write cut short by a full disk leaves
    the two in step)."""

    def write(fd: int, chunk: bytes) -> None:
        view = memoryview(chunk)
        while view:
            written = os.write(fd, view)
            if digest_update is not None:
                digest_update(view[:written])
            view = view[written:]

    return write


class Appending:
    """One PATCH's hold on an upload (`service.store.uploads.Appending`): its
    data file open for appending and locked. `consume` appends a chunk (and
    moves `offset`); `end` (or `close`) on every path out."""

    def __init__(
        self, owner: PartialUploads, upload_id: str, path: Path, fd: int, length: int, offset: int, digest: hashlib._Hash | None
    ) -> None:
        self.owner = owner
        self.upload_id = upload_id
        self.path = path  # the data file
        self.fd = fd
        self.length = length
        self.start = offset
        self.offset = offset
        self.digest = digest

    @property
    def room(self) -> int:
        """Bytes the upload may still take."""
        return self.length - self.offset

    def consume(self, chunk: bytes, digest_update: DigestUpdate | None) -> None:
        """Append `chunk`, feeding `digest_update` exactly the bytes written."""
        chunk_writer(digest_update)(self.fd, chunk)
        self.offset += len(chunk)

    def end(self) -> float | None:
        return self.close()

    def close(self) -> float | None:
        """Keep what was written (its digest, for this process), release the
        lock; the upload's new expiry time, or None if it was removed meanwhile."""
        try:
            info = os.fstat(self.fd)
            if self.offset == self.start and info.st_size < self.length:
                os.utime(self.fd)  # a PATCH without bytes still counts as activity (never on a finished upload: see link_into)
                info = os.fstat(self.fd)
            hashed = self.digest is not None and self.offset == info.st_size
            self.owner.keep_digest(self.upload_id, info.st_size, self.digest if hashed else None)
            try:
                named = os.stat(self.path)
            except (FileNotFoundError, NotADirectoryError):
                named = None
            if named is None or (named.st_dev, named.st_ino) != (info.st_dev, info.st_ino):
                self.owner.keep_digest(self.upload_id, 0, None)
                return None
            return info.st_mtime + self.owner.expiry
        finally:
            os.close(self.fd)  # releases the flock


class PartialUploads:
    def __init__(self, local_root: Path, store: Store, expiry: float, max_open: int) -> None:
        self.root = local_root / "uploads"  # beside the work area (tmp/): one file system
        self.store = store  # its free space and eviction
        self.expiry = expiry
        self.max_open = max_open
        self.digests: dict[str, tuple[int, hashlib._Hash]] = {}  # upload id -> (bytes hashed, their SHA-256 so far)

    def open(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.sweep()

    # --- paths and records

    def _folder(self, tenant: str, upload_id: str) -> Path:
        """The upload's folder; NotFound for an id that cannot be one."""
        if not UPLOAD_ID.fullmatch(upload_id):
            raise _not_found(upload_id)
        return self.root / tenant_key(tenant) / upload_id

    def _expired(self, info: os.stat_result, now: float | None = None) -> bool:
        return info.st_mtime + self.expiry < (time.time() if now is None else now)

    @staticmethod
    def _record(folder: Path) -> UploadRecord:
        return UploadRecord.model_validate_json((folder / RECORD_FILE).read_bytes())

    def _state(self, upload_id: str, record: UploadRecord, info: os.stat_result) -> UploadState:
        return UploadState(upload_id, record.length, info.st_size, record.metadata, record.filename, info.st_mtime + self.expiry)

    @contextlib.contextmanager
    def _creating(self) -> Iterator[None]:
        """Creations one at a time, in every process sharing the folder."""
        fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # --- the protocol's operations

    def create(self, tenant: str, length: int, metadata: str, filename: str) -> UploadState:
        """A new empty upload of `length` bytes. TooManyUploads past the
        tenant's count; TenantQuotaExceeded if the tenant's stored bytes, its
        open uploads and this one would pass `--tenant-max-bytes`, or its open
        uploads and this one its share of the store's room
        (`--tenant-max-reserved`); StoreFull if the bytes every upload still
        awaits (this one's included) would take the store below its free-space
        floor. Nothing is evicted (`Store.check_reservation`)."""
        tenant_dir = self.root / tenant_key(tenant)
        with self._creating():
            survey = self._survey(tenant_dir)
            check_creation(
                self.store, tenant, length, self.max_open,
                open_now=survey.tenant_open, declared=survey.tenant_declared, awaited=survey.awaited, held=survey.held,
            )  # fmt: skip
            tenant_dir.mkdir(parents=True, exist_ok=True)
            upload_id = secrets.token_hex(16)
            making = tenant_dir / f".{upload_id}.new-{secrets.token_hex(4)}"
            making.mkdir()
            try:
                os.close(os.open(making / DATA_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
                record = UploadRecord(length=length, metadata=metadata, filename=filename, created_ns=time.time_ns())
                write_file_atomically(making / RECORD_FILE, record.model_dump_json().encode())
                os.rename(making, tenant_dir / upload_id)
            except BaseException:
                shutil.rmtree(making, ignore_errors=True)
                raise
            fsync_dir(tenant_dir)
        return UploadState(upload_id, length, 0, metadata, filename, time.time() + self.expiry)

    def find(self, tenant: str, upload_id: str) -> UploadState:
        """The upload's state; NotFound if it is not this tenant's, or expired (then removed)."""
        folder = self._folder(tenant, upload_id)
        try:
            record = self._record(folder)
            info = os.stat(folder / DATA_FILE)
        except (FileNotFoundError, NotADirectoryError):
            raise _not_found(upload_id) from None
        if self._expired(info) and self._remove_idle(folder, upload_id):
            raise _not_found(upload_id)
        return self._state(upload_id, record, info)

    def append(self, tenant: str, upload_id: str, offset: int) -> Appending:
        """Hold the upload for one PATCH from `offset`: UploadBusy if another
        request holds it, UploadOffsetMismatch unless `offset` is the bytes it holds."""
        folder = self._folder(tenant, upload_id)
        try:
            fd = os.open(folder / DATA_FILE, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise _not_found(upload_id) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UploadBusy(
                    f"another request is writing upload {upload_id} now; once it ends, HEAD gives the offset to resume from"
                ) from None
            info = os.fstat(fd)
            try:
                record = self._record(folder)
                named = os.stat(folder / DATA_FILE)
            except (FileNotFoundError, NotADirectoryError):
                raise _not_found(upload_id) from None
            if (named.st_dev, named.st_ino) != (info.st_dev, info.st_ino):  # removed (and the id is never reused)
                raise _not_found(upload_id)
            if self._expired(info):
                self._remove(folder, upload_id)
                raise _not_found(upload_id)
            if info.st_size != offset:
                raise UploadOffsetMismatch(
                    f"the upload holds {info.st_size} bytes, not {offset}: PATCH from Upload-Offset: {info.st_size}", info.st_size
                )
            digest = self._take_digest(upload_id, info.st_size)
            return Appending(self, upload_id, folder / DATA_FILE, fd, record.length, info.st_size, digest)
        except BaseException:
            os.close(fd)
            raise

    def remove(self, tenant: str, upload_id: str) -> bool:
        """Remove the upload (a PATCH writing it goes on into a removed file
        and answers 404); False if there was none."""
        return self._remove(self._folder(tenant, upload_id), upload_id)

    def link_into(self, tenant: str, upload_id: str, target: Path) -> tuple[int, str]:
        """Hard-link the finished upload's bytes to `target` (an import's work
        folder, on the same file system; copied if it is not); their size and
        SHA-256. NotFound, or UploadIncomplete. A finished upload is never
        written again (not even its mtime), so the link is the bytes checked."""
        folder = self._folder(tenant, upload_id)
        try:
            fd = os.open(folder / DATA_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise _not_found(upload_id) from None
        try:
            try:
                record = self._record(folder)
            except FileNotFoundError:
                raise _not_found(upload_id) from None
            size = os.fstat(fd).st_size
            if size != record.length:
                raise UploadIncomplete(
                    f"upload {upload_id} holds {size} of its {record.length} bytes: PATCH the rest first", upload_id, size
                )
            try:
                os.link(folder / DATA_FILE, target)
            except FileNotFoundError:
                raise _not_found(upload_id) from None
            except OSError as error:
                if error.errno != errno.EXDEV:
                    raise
                shutil.copyfile(folder / DATA_FILE, target)
            return size, self._finished_digest(upload_id, fd, size)
        finally:
            os.close(fd)

    # --- digests this process computed

    def _take_digest(self, upload_id: str, offset: int) -> hashlib._Hash | None:
        """The digest of the upload's first `offset` bytes, to go on with (None
        if this process did not hash them all: the import hashes the file)."""
        kept = self.digests.pop(upload_id, None)
        if kept is not None and kept[0] == offset:
            return kept[1]
        return hashlib.sha256() if offset == 0 else None

    def keep_digest(self, upload_id: str, offset: int, digest: hashlib._Hash | None) -> None:
        if digest is None:
            self.digests.pop(upload_id, None)
            return
        if len(self.digests) >= DIGESTS_KEPT:
            self.digests.clear()
        self.digests[upload_id] = (offset, digest)

    def _finished_digest(self, upload_id: str, fd: int, size: int) -> str:
        kept = self.digests.get(upload_id)
        if kept is not None and kept[0] == size:
            return kept[1].hexdigest()
        digest = hashlib.sha256()  # written (in part) by another process, or before a restart
        position = 0
        while chunk := os.pread(fd, HASH_CHUNK, position):
            digest.update(chunk)
            position += len(chunk)
        if position != size:
            raise OSError(errno.EIO, f"upload {upload_id} changed while it was hashed")
        self.keep_digest(upload_id, size, digest)
        return digest.hexdigest()

    # --- removal, expiry and the space reserved

    def _remove(self, folder: Path, upload_id: str) -> bool:
        self.digests.pop(upload_id, None)
        gone = folder.parent / f".gone-{secrets.token_hex(8)}"
        try:
            os.rename(folder, gone)
        except (FileNotFoundError, NotADirectoryError):
            return False
        shutil.rmtree(gone, ignore_errors=True)
        return True

    def _remove_idle(self, folder: Path, upload_id: str) -> bool:
        """Remove an expired upload unless a PATCH holds it (it is alive then); whether it was removed."""
        try:
            fd = os.open(folder / DATA_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        else:
            return self._remove(folder, upload_id)
        finally:
            os.close(fd)

    def _uploads(self) -> Iterator[Path]:
        """Every upload folder of every tenant (none of the leftovers)."""
        with contextlib.suppress(FileNotFoundError):
            for tenant_dir in self.root.iterdir():
                if tenant_dir.is_dir():
                    with contextlib.suppress(FileNotFoundError):
                        yield from (entry for entry in tenant_dir.iterdir() if UPLOAD_ID.fullmatch(entry.name))

    def _survey(self, tenant_dir: Path | None) -> Survey:
        """The open uploads (`tenant_dir`'s tenant's among them), removing the expired ones met on the way."""
        reserved, held, open_now, declared, now = 0, 0, 0, 0, time.time()
        for folder in self._uploads():
            try:
                length = self._record(folder).length
                info = os.stat(folder / DATA_FILE)
            except (FileNotFoundError, NotADirectoryError, ValueError):
                continue  # removed meanwhile, or half made (the sweep's)
            if self._expired(info, now) and self._remove_idle(folder, folder.name):
                continue
            reserved += max(0, length - info.st_size)
            held += info.st_size
            if folder.parent == tenant_dir:
                open_now += 1
                declared += length
        return Survey(reserved, held, open_now, declared)

    def reserved(self) -> int:
        """Bytes the uploads still await (they count against the store's free space)."""
        return self._survey(None).awaited

    def collect_orphans(self) -> list[str]:
        """Nothing: what a creation or a removal cut short leaves is the sweep's (on this disk, named by no id)."""
        return []

    def sweep(self) -> int:
        """Remove the expired uploads (not one a PATCH holds) and what a
        creation or removal cut short left; the number of uploads removed."""
        removed, now = 0, time.time()
        for folder in list(self._uploads()):
            try:
                info = os.stat(folder / DATA_FILE)
            except (FileNotFoundError, NotADirectoryError):
                if _older_than(folder, LEFTOVER_SECONDS, now):  # no data file: broken, not being made
                    removed += self._remove(folder, folder.name)
                continue
            if self._expired(info, now) and self._remove_idle(folder, folder.name):
                removed += 1
                log.info("removed an expired upload (%s)", folder.name)
        with contextlib.suppress(FileNotFoundError):
            for tenant_dir in self.root.iterdir():
                if not tenant_dir.is_dir():
                    continue
                for entry in list(tenant_dir.iterdir()):
                    if entry.name.startswith(".gone-") or (entry.name.startswith(".") and _older_than(entry, LEFTOVER_SECONDS, now)):
                        shutil.rmtree(entry, ignore_errors=True)
        return removed


def _older_than(path: Path, seconds: float, now: float) -> bool:
    try:
        return os.lstat(path).st_mtime + seconds < now
    except FileNotFoundError:
        return False


def _not_found(upload_id: str) -> NotFound:
    return NotFound(f"no upload {bounded(repr(upload_id), 80)}")
