"""Resumable uploads (tus 1.0, `/uploads`): their bytes in the store's `Blobs`, their state in its SQL index.

Owns `ResumableUploads` (create an upload of a declared length, look one up,
append to one, link a finished one into an import's work folder, remove
one, the sweep of the expired, the bytes reserved, `gc --full`'s orphans),
`UploadState` (an upload as HEAD tells it), `Appending` (one PATCH's hold
on an upload: `consume` each chunk, `end` once) and `check_creation`. One
implementation for every store, over its two seams:

- the state is a row of the index (`service.store.sql.upload_rows`: SQLite or
  PostgreSQL alike): the tenant (by the index's key: a tenant sees only its
  own, and another's is missing to it as one that never existed), the
  declared length and metadata, the recorded parts, the last write (the
  expiry, `--upload-expiry`, counts from it) and the lease of the one
  request writing it (taken without waiting: a second writer is
  `UploadBusy`); creations are counted in one transaction across every
  process (`--max-open-uploads`, the tenant's bytes and share of the room,
  the free space: `check_creation`; a creation never evicts);
- the bytes are objects of the store's bytes below `uploads/<tenant key>/<id>/`,
  beside the models' `models/`: parts (`part-000001`, ...), each put as
  `PART_BYTES` arrive and when a PATCH ends, from a buffer in the work
  area, so any replica of a fleet continues, answers HEAD for, removes or
  imports any upload; the offset HEAD gives is what is recorded. What a
  replica killed mid-PATCH had buffered is lost, and sent again by the
  client from that offset; a part it put but did not record is named by no
  row, and goes with its upload. An import fetches the parts in order into
  its work folder, hashing each while the next is fetched.

A store whose bytes are files of a folder on this machine (`in_place`: a
folder store, where every process continuing an upload shares the folder)
keeps one part per upload, appended to in place as the bytes arrive, at
`uploads/<T>/<id>/data` (where the releases before kept them): the offset
is its size (HEAD sees the bytes as they arrive, and a process killed
mid-PATCH loses nothing written), a writer holds an flock on it besides its
lease (the kernel drops it with the process, so another process takes over
at once), the digest of what this process's PATCHes wrote is kept and used
at import when it covers the whole upload (else the file is hashed), and an
import hard-links the file into its work folder: never a copy of an upload's size.

A removal (DELETE, after an import, the sweep) deletes the objects first,
then the row (should storage not answer, the row stays for the sweep to try
again); a PATCH writing a removed upload records nothing more and answers
404. Every process sweeps (each step may run twice, harmlessly).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from service.errors import (
    NotFound,
    StorageUnavailable,
    TenantQuotaExceeded,
    TooManyUploads,
    UploadBusy,
    UploadIncomplete,
    UploadOffsetMismatch,
    bounded,
)
from service.store.model_store import Store
from service.store.sql.index import tenant_key
from service.store.sql.upload_rows import UploadRow, UploadRows

log = logging.getLogger("service.store")

UPLOAD_ID = re.compile(r"[0-9a-f]{32}")
DigestUpdate = Callable[[memoryview], object]  # a hash object's update, or a thread's hashing it
PART_BYTES = 8 << 20  # a part put from the buffer: what a killed replica loses, and the buffer a PATCH holds
LEASE_SECONDS = 10.0  # a dead writer's lease lapses after this
RENEW_SECONDS = 2.0  # a live writer renews its lease this often while bytes arrive
HASH_CHUNK = 1 << 20
DIGESTS_KEPT = 10_000
LEFTOVER_SECONDS = 60.0  # an upload folder no row names (its creation cut short) older than this is removed by the sweep
UPLOADS = "uploads/"
IN_PLACE = "data"  # the one part of an upload appended to in place


@dataclass(frozen=True, slots=True)
class UploadState:
    upload_id: str
    length: int
    offset: int  # bytes held (what a restart or another replica would find)
    metadata: str
    filename: str
    expires: float  # Unix time, unless written to again

    @property
    def complete(self) -> bool:
        return self.offset == self.length


@dataclass(frozen=True, slots=True)
class Survey:
    """The live uploads, as a creation counts them."""

    awaited: int  # bytes every upload still awaits (reserved: they count against the store's free space)
    held: int  # bytes every upload holds on this machine's file system
    tenant_open: int  # uploads of one tenant
    tenant_declared: int  # their declared lengths


class Appending(Protocol):
    """One PATCH's hold on an upload (one writer at a time). The caller hands
    each chunk to `consume` (it moves `offset`) and calls `end` once, on every
    path out: what was consumed is kept (as far as it became durable); `end`
    gives the upload's new expiry time, or None if it was removed meanwhile."""

    @property
    def upload_id(self) -> str: ...
    @property
    def length(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def room(self) -> int: ...
    @property
    def digest(self) -> hashlib._Hash | None:
        """The SHA-256 of the bytes before `offset`, when this process has it: the caller
        goes on hashing what it consumes (`consume`'s `digest_update`); else None."""

    @property
    def fd(self) -> int | None:
        """The file the bytes are appended to, for early writeback; None when they go elsewhere."""

    def consume(self, chunk: bytes, digest_update: DigestUpdate | None) -> None: ...
    def end(self) -> float | None: ...


def check_creation(store: Store, tenant: str, length: int, max_open: int, *, open_now: int, declared: int, awaited: int, held: int) -> None:
    """A new upload of `length` bytes may be created for `tenant`, who has
    `open_now` uploads open declaring `declared` bytes, beside uploads that
    await `awaited` bytes and hold `held`: TooManyUploads past the tenant's
    count (`--max-open-uploads`); TenantQuotaExceeded if the tenant's stored
    bytes, its open uploads and this one would pass `--tenant-max-bytes`, or
    its share of the store's room; StoreFull (`Store.check_reservation`)."""
    if open_now >= max_open:
        raise TooManyUploads(f"the tenant has {open_now} uploads open, the most it may (--max-open-uploads); finish or DELETE one")
    cap = store.tenant_max_bytes
    if cap and (used := store.tenant_usage(tenant)[0]) + declared + length > cap:  # refused now, not after the bytes came
        raise TenantQuotaExceeded(
            f"the tenant's models take {used} bytes and its open uploads {declared}; {length} more would pass its cap of "
            f"{cap} (--tenant-max-bytes)",
            limit="tenant_max_bytes",
        )
    store.check_reservation(length, awaited=awaited, held=held, tenant_declared=declared)


def _folder(key: str, upload_id: str) -> str:
    return f"{UPLOADS}{key}/{upload_id}/"


def _part(key: str, upload_id: str, number: int) -> str:
    return f"{_folder(key, upload_id)}part-{number:06d}"


def _not_found(upload_id: str) -> NotFound:
    return NotFound(f"no upload {bounded(repr(upload_id), 80)}")


def _busy(upload_id: str) -> UploadBusy:
    return UploadBusy(f"another request is writing upload {upload_id} now; once it ends, HEAD gives the offset to resume from")


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


def _older_than(path: Path, seconds: float, now: float) -> bool:
    try:
        return os.lstat(path).st_mtime + seconds < now
    except FileNotFoundError:
        return False


class ResumableUploads:
    def __init__(self, store: Store, expiry: float, max_open: int, *, in_place: Path | None = None) -> None:
        """`in_place`: the folder the store's bytes are files of (a folder store's,
        `Blobs` keys being paths below it): each upload's bytes are appended to
        one file there; None: parts put from each PATCH's buffer (object storage)."""
        self.store = store
        self.blobs = store.content.blobs
        self.expiry = expiry
        self.max_open = max_open
        self.in_place = in_place
        self.rows: UploadRows = store.index.upload_rows(expiry, LEASE_SECONDS)
        self.digests: dict[str, tuple[int, hashlib._Hash]] = {}  # upload id -> (bytes hashed, their SHA-256 so far): in place only

    def open(self) -> None:
        """Sweep the uploads that expired while stopped (StorageUnavailable while the storage does not answer)."""
        self.sweep()

    # --- where the bytes are

    def _data(self, key: str, upload_id: str) -> Path:
        """The file an upload's bytes are appended to in place."""
        assert self.in_place is not None
        return self.in_place / _folder(key, upload_id) / IN_PLACE

    def _in_place_size(self, row: UploadRow) -> int:
        if self.in_place is None:
            return 0
        try:
            return os.stat(self._data(row.tenant_key, row.upload_id)).st_size
        except (FileNotFoundError, NotADirectoryError):
            return 0

    def _offset(self, row: UploadRow) -> int:
        """The bytes the upload holds: its recorded parts, and what was appended in place."""
        return row.parts_bytes + self._in_place_size(row)

    def _state(self, row: UploadRow) -> UploadState:
        return UploadState(row.upload_id, row.length, self._offset(row), row.metadata, row.filename, row.last_write + self.expiry)

    def _survey(self, key: str) -> Survey:
        awaited = held = tenant_open = tenant_declared = 0
        for row in self.rows.live():
            offset = self._offset(row)
            awaited += max(0, row.length - offset)
            held += self._in_place_size(row) + (row.parts_bytes if self.blobs.local else 0)  # on this machine's disk
            if row.tenant_key == key:
                tenant_open += 1
                tenant_declared += row.length
        return Survey(awaited, held, tenant_open, tenant_declared)

    # --- the protocol's operations

    def create(self, tenant: str, length: int, metadata: str, filename: str) -> UploadState:
        """A new empty upload of `length` bytes. TooManyUploads past the
        tenant's count; TenantQuotaExceeded if the tenant's stored bytes, its
        open uploads and this one would pass `--tenant-max-bytes`, or its open
        uploads and this one its share of the store's room
        (`--tenant-max-reserved`); StoreFull if the bytes every upload still
        awaits (this one's included) would take the store below its free-space
        floor. Nothing is evicted (`Store.check_reservation`)."""
        key = tenant_key(tenant)
        upload_id = secrets.token_hex(16)
        with self.rows.creating():
            survey = self._survey(key)
            check_creation(
                self.store, tenant, length, self.max_open,
                open_now=survey.tenant_open, declared=survey.tenant_declared, awaited=survey.awaited, held=survey.held,
            )  # fmt: skip
            if self.in_place is not None:  # the file first: one no row names is the sweep's
                data = self._data(key, upload_id)
                data.parent.mkdir(parents=True, exist_ok=True)
                os.close(os.open(data, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
            try:
                created = self.rows.insert(upload_id, key, length, metadata, filename, time.time_ns())
            except BaseException:
                if self.in_place is not None:
                    shutil.rmtree(self._data(key, upload_id).parent, ignore_errors=True)
                raise
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
        """The upload's state; NotFound if it is not this tenant's, or expired (then removed)."""
        return self._state(self._row(tenant, upload_id))

    def append(self, tenant: str, upload_id: str, offset: int) -> Appending:
        """Hold the upload for one PATCH from `offset`: UploadBusy if another
        request (of any process, on any replica) holds it, UploadOffsetMismatch
        unless `offset` is the bytes it holds."""
        if not UPLOAD_ID.fullmatch(upload_id):
            raise _not_found(upload_id)
        if self.in_place is not None:
            return self._append_in_place(tenant, upload_id, offset)
        token = secrets.token_hex(16)
        row = self.rows.take(tenant_key(tenant), upload_id, token)
        if row is None:
            self._row(tenant, upload_id)  # NotFound, or expired (then removed)
            raise _busy(upload_id)
        try:
            if row.parts_bytes != offset:
                raise UploadOffsetMismatch(
                    f"the upload holds {row.parts_bytes} bytes, not {offset}: PATCH from Upload-Offset: {row.parts_bytes}", row.parts_bytes
                )
            return PartsAppending(self, row, token)
        except BaseException:
            with contextlib.suppress(StorageUnavailable):
                self.rows.release(upload_id, token, touch=False)
            raise

    def _append_in_place(self, tenant: str, upload_id: str, offset: int) -> InPlaceAppending:
        key = tenant_key(tenant)
        self._row(tenant, upload_id)  # NotFound before any file is touched
        data = self._data(key, upload_id)
        try:
            fd = os.open(data, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise _not_found(upload_id) from None
        token = ""
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _busy(upload_id) from None
            token = secrets.token_hex(16)
            row = self.rows.take(key, upload_id, token, force=True)  # no other writer lives: its flock would be held
            if row is None:
                token = ""
                self._row(tenant, upload_id)  # expired meanwhile, or removed: NotFound
                raise _not_found(upload_id)
            info = os.fstat(fd)
            try:
                named = os.stat(data)
            except (FileNotFoundError, NotADirectoryError):
                raise _not_found(upload_id) from None
            if (named.st_dev, named.st_ino) != (info.st_dev, info.st_ino):  # removed (and the id is never reused)
                raise _not_found(upload_id)
            if info.st_size != offset:
                raise UploadOffsetMismatch(
                    f"the upload holds {info.st_size} bytes, not {offset}: PATCH from Upload-Offset: {info.st_size}", info.st_size
                )
            return InPlaceAppending(self, row, token, data, fd, info.st_size, self._take_digest(upload_id, info.st_size))
        except BaseException:
            if token:
                with contextlib.suppress(StorageUnavailable):
                    self.rows.release(upload_id, token, touch=False)
            os.close(fd)
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
        self.digests.pop(row.upload_id, None)
        self.blobs.delete(self.blobs.keys(_folder(row.tenant_key, row.upload_id)))
        return self.rows.delete(row.upload_id)

    def _remove_idle(self, row: UploadRow) -> bool:
        """Remove an expired upload unless a PATCH holds it; whether it is gone."""
        idle = self.rows.expired(row.upload_id)
        if idle:
            return self._remove(idle[0])
        return not self.rows.exists(row.upload_id)

    def link_into(self, tenant: str, upload_id: str, target: Path) -> tuple[int, str]:
        """The finished upload's bytes at `target` (a path in an import's work
        folder): hard-linked where they are one file on the same file system,
        else its parts fetched in order; their size and SHA-256. NotFound
        (removed meanwhile), or UploadIncomplete."""
        row = self._row(tenant, upload_id)
        if self.in_place is not None:
            return self._link_in_place(row, target)
        if row.parts_bytes != row.length:
            raise UploadIncomplete(
                f"upload {upload_id} holds {row.parts_bytes} of its {row.length} bytes: PATCH the rest first", upload_id, row.parts_bytes
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

    def _link_in_place(self, row: UploadRow, target: Path) -> tuple[int, str]:
        """Hard-link the finished upload's file to `target` (copied if it is on
        another file system). A finished upload is never written again, so the
        link is the bytes checked."""
        data = self._data(row.tenant_key, row.upload_id)
        try:
            fd = os.open(data, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise _not_found(row.upload_id) from None
        try:
            size = os.fstat(fd).st_size
            if size != row.length:
                raise UploadIncomplete(
                    f"upload {row.upload_id} holds {size} of its {row.length} bytes: PATCH the rest first", row.upload_id, size
                )
            try:
                os.link(data, target)
            except FileNotFoundError:
                raise _not_found(row.upload_id) from None
            except OSError as error:
                if error.errno != errno.EXDEV:
                    raise
                shutil.copyfile(data, target)
            return size, self._finished_digest(row.upload_id, fd, size)
        finally:
            os.close(fd)

    # --- digests this process computed (in place)

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

    # --- expiry, the space reserved, garbage

    def sweep(self) -> int:
        """Remove the expired uploads no PATCH holds (and, in place, what a
        creation cut short left); the number of uploads removed."""
        removed = 0
        for row in self.rows.expired(""):
            if self._remove(row):
                removed += 1
                log.info("removed an expired upload (%s)", row.upload_id)
        if self.in_place is not None:
            self._sweep_leftovers()
        return removed

    def _sweep_leftovers(self) -> None:
        """Upload folders no row names, a minute old (a creation cut short), and
        what the releases before left being made or removed (`.<id>.new-*`, `.gone-*`)."""
        assert self.in_place is not None
        now = time.time()
        with contextlib.suppress(FileNotFoundError):
            for tenant in (self.in_place / UPLOADS).iterdir():
                if not tenant.is_dir():
                    continue
                for entry in list(tenant.iterdir()):
                    if entry.name.startswith("."):
                        if entry.name.startswith(".gone-") or _older_than(entry, LEFTOVER_SECONDS, now):
                            shutil.rmtree(entry, ignore_errors=True)
                    elif UPLOAD_ID.fullmatch(entry.name) and _older_than(entry, LEFTOVER_SECONDS, now) and not self.rows.exists(entry.name):
                        self.blobs.delete(self.blobs.keys(_folder(tenant.name, entry.name)))

    def reserved(self) -> int:
        """Bytes the uploads still await (they count against the store's free space)."""
        return self._survey("").awaited

    def collect_orphans(self) -> list[str]:
        """`gc --full`: remove the objects under `uploads/` of uploads no row
        names (a part a PATCH put while another replica removed its upload);
        their folders. Listed before the rows are read: an upload's row is
        written before its first part and deleted after its last, so a folder
        listed whose row is gone is garbage (in place, a file is made before its
        row: one younger than a minute is left to the next sweep)."""
        folders: dict[str, list[str]] = {}  # folder -> its keys
        upload_ids: dict[str, str] = {}  # folder -> the upload id it is named after
        for key in self.blobs.keys(UPLOADS):
            tenant, _, rest = key.removeprefix(UPLOADS).partition("/")
            upload_id = rest.partition("/")[0]
            if UPLOAD_ID.fullmatch(upload_id):
                folder = _folder(tenant, upload_id)
                folders.setdefault(folder, []).append(key)
                upload_ids[folder] = upload_id
        now = time.time()
        orphans = sorted(
            folder
            for folder, upload_id in upload_ids.items()
            if not self.rows.exists(upload_id) and (self.in_place is None or _older_than(self.in_place / folder, LEFTOVER_SECONDS, now))
        )
        for folder in orphans:
            self.blobs.delete(folders[folder])
            log.info("removed the objects of an upload no row names (%s)", folder)
        return orphans


class _Writer:
    """What both ways of writing share: the lease, its renewal, its end."""

    def __init__(self, owner: ResumableUploads, row: UploadRow, token: str, offset: int) -> None:
        self.owner = owner
        self.rows = owner.rows
        self.row = row
        self.upload_id = row.upload_id
        self.token = token
        self.length = row.length
        self.start = offset
        self.offset = offset  # bytes consumed
        self.renewed = time.monotonic()

    @property
    def room(self) -> int:
        """Bytes the upload may still take."""
        return self.length - self.offset

    @property
    def consumed(self) -> int:
        return self.offset - self.start

    def _renew(self) -> None:
        if time.monotonic() - self.renewed > RENEW_SECONDS:
            if not self.rows.renew(self.upload_id, self.token):
                raise self._lost()
            self.renewed = time.monotonic()

    def _lost(self) -> NotFound | UploadBusy:
        """The error of a write the lease no longer covers: the upload was taken over, or removed."""
        if self.rows.exists(self.upload_id):
            return UploadBusy(f"upload {self.upload_id} was taken over by another request; HEAD gives the offset to resume from")
        return _not_found(self.upload_id)


class InPlaceAppending(_Writer):
    """One PATCH's hold on an upload appended to in place: its file open for
    appending and flocked, and the lease. `consume` appends a chunk (and moves
    `offset`); `end` on every path out."""

    def __init__(
        self, owner: ResumableUploads, row: UploadRow, token: str, path: Path, fd: int, offset: int, digest: hashlib._Hash | None
    ) -> None:
        super().__init__(owner, row, token, offset)
        self.path = path
        self.fd: int | None = fd
        self.digest = digest

    def consume(self, chunk: bytes, digest_update: DigestUpdate | None) -> None:
        """Append `chunk`, feeding `digest_update` exactly the bytes written (a
        write cut short by a full disk leaves the two in step)."""
        assert self.fd is not None
        view = memoryview(chunk)
        while view:
            written = os.write(self.fd, view)
            if digest_update is not None:
                digest_update(view[:written])
            self.offset += written
            view = view[written:]
        self._renew()

    def end(self) -> float | None:
        """Keep what was written (its digest, for this process), let go of the
        lease and the flock; the upload's new expiry time, or None if it was removed meanwhile."""
        fd, self.fd = self.fd, None
        if fd is None:
            return None
        try:
            info = os.fstat(fd)
            touch = self.consumed > 0 or info.st_size < self.length  # a PATCH without bytes counts, but on a finished upload
            last_write = self.rows.release(self.upload_id, self.token, touch=touch)
            try:
                named = os.stat(self.path)
            except (FileNotFoundError, NotADirectoryError):
                named = None
            if last_write is None or named is None or (named.st_dev, named.st_ino) != (info.st_dev, info.st_ino):
                self.owner.keep_digest(self.upload_id, 0, None)
                return None
            hashed = self.digest is not None and self.offset == info.st_size
            self.owner.keep_digest(self.upload_id, info.st_size, self.digest if hashed else None)
            return last_write + self.owner.expiry
        finally:
            os.close(fd)  # releases the flock


class PartsAppending(_Writer):
    """One PATCH's hold on an upload put in parts: its lease, and the bytes not
    yet put as a part in a file of the work area."""

    digest = None  # nobody hashes on the way: the import hashes what it fetched
    fd = None  # nothing to write back: the buffer goes to the store's objects

    def __init__(self, owner: ResumableUploads, row: UploadRow, token: str) -> None:
        super().__init__(owner, row, token, row.parts_bytes)
        self.blobs = owner.blobs
        self.next_part = row.next_part
        self.held = True  # the lease is this PATCH's (False once it was found taken over, or the upload removed)
        self.buffer_path = owner.store.work_area.folder / f"upload-part-{token}"
        self.buffer: IO[bytes] = open(self.buffer_path, "wb")  # noqa: SIM115  # closed by _put_part and end()
        self.buffered = 0

    def consume(self, chunk: bytes, digest_update: DigestUpdate | None) -> None:
        """Buffer `chunk`, putting each `PART_BYTES` buffered as a part."""
        view = memoryview(chunk)
        while view:
            piece = view[: PART_BYTES - self.buffered]
            self.buffer.write(piece)
            self.buffered += len(piece)
            self.offset += len(piece)
            view = view[len(piece) :]
            if self.buffered == PART_BYTES:
                self._put_part()
        self._renew()

    def _lost(self) -> NotFound | UploadBusy:
        self.held = False
        return super()._lost()

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
