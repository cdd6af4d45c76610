"""The resumable uploads' rows in the SQL index: their state, their parts, the lease of their one writer.

Owns `UploadRows` over the tables `onnx_resumable_uploads` and
`onnx_resumable_parts` (`service.store.sql.schema`, migration 5), the same
queries in SQLite and PostgreSQL, and `UploadRow`, one upload as a process
reads it. Every statement is one, in autocommit, but for a creation's count
and insert (`creating`: creations one at a time, across every process that
shares the database) and a part's record (`add_part`: the upload's row and
its part's together). Times are the database's clock (`Dialect`): the last
write (the expiry counts from it) and a lease's end.

The lease: a writer takes the row with a fresh token, without waiting
(`take`: none when another's lease is alive; `force`: a writer that knows
no other is alive, by a lock the kernel drops with its process), and holds
it while its lease runs (`renew`); a lease left by a process that died
lapses after `lease_seconds` and is taken over then, the part number moving
one on (the dead writer may have put one more part under the number it was
at: it is never recorded, and never used again). Each record of the writer
(a part, the end) is conditional on its token still holding the row: a
writer taken over or removed records nothing more.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from service.store.sql.database import UPLOADS_LOCK, SqlDatabase


@dataclass(frozen=True, slots=True)
class UploadRow:
    upload_id: str
    tenant_key: str
    length: int
    metadata: str
    filename: str
    parts_bytes: int  # bytes of the recorded parts
    next_part: int  # the number of the next part to put
    last_write: float  # Unix time (the database's clock)
    expired: bool


def _row(values: tuple[Any, ...] | None) -> UploadRow | None:
    if values is None:
        return None
    upload_id, key, length, metadata, filename, parts_bytes, next_part, last_write, expired = values
    return UploadRow(
        str(upload_id), str(key), int(length), str(metadata), str(filename),
        int(parts_bytes), int(next_part), float(last_write), bool(expired),
    )  # fmt: skip


class UploadRows:
    def __init__(self, database: SqlDatabase, expiry: float = 86400.0, lease_seconds: float = 10.0) -> None:
        self.database = database
        self.expiry = expiry  # seconds after the last write
        self.lease_seconds = lease_seconds
        dialect = database.dialect
        ago, ahead, now = dialect.seconds_ago, dialect.seconds_ahead, dialect.now
        self._columns = (
            "id, tenant_key, length, metadata, filename, parts_bytes, next_part, "
            f"{dialect.unix_time.format('last_write')}, last_write < {ago}"
        )
        self._live = f"last_write >= {ago}"
        self._insert = (
            "INSERT INTO onnx_resumable_uploads (id, tenant_key, length, metadata, filename, created_ns, last_write, lease_until)"
            f" VALUES (%s, %s, %s, %s, %s, %s, {now}, {dialect.epoch}) RETURNING {dialect.unix_time.format('last_write')}"
        )
        self._take = (
            f"UPDATE onnx_resumable_uploads SET lease = %s, lease_until = {ahead}, "
            "next_part = next_part + CASE WHEN lease <> '' THEN 1 ELSE 0 END "  # taken over: the dead writer's part number is not reused
            f"WHERE id = %s AND tenant_key = %s AND (%s OR lease = '' OR lease_until < {now}) AND last_write >= {ago} "
            f"RETURNING {self._columns}"
        )
        self._renew = f"UPDATE onnx_resumable_uploads SET lease_until = {ahead}, last_write = {now} WHERE id = %s AND lease = %s"
        self._add_part = (
            f"UPDATE onnx_resumable_uploads SET parts_bytes = parts_bytes + %s, next_part = %s, last_write = {now}, "
            f"lease_until = {ahead} WHERE id = %s AND lease = %s"
        )
        self._release = (
            f"UPDATE onnx_resumable_uploads SET lease = '', lease_until = {dialect.epoch}, "
            f"last_write = CASE WHEN %s THEN {now} ELSE last_write END WHERE id = %s AND lease = %s "
            f"RETURNING {dialect.unix_time.format('last_write')}"
        )
        self._expired = (
            f"SELECT {self._columns} FROM onnx_resumable_uploads WHERE last_write < {ago} "
            f"AND (lease = '' OR lease_until < {now}) AND (%s = '' OR id = %s) ORDER BY last_write LIMIT 1000"
        )

    def creating(self) -> AbstractContextManager[None]:
        """A transaction in which creations are one at a time, across every process (count, then insert)."""
        return self.database.locked(UPLOADS_LOCK)

    def live(self) -> list[UploadRow]:
        """Every upload not expired, every tenant's (a creation counts them)."""
        query = f"SELECT {self._columns} FROM onnx_resumable_uploads WHERE {self._live}"
        return [row for values in self.database.rows(query, (self.expiry, self.expiry)) if (row := _row(values)) is not None]

    def insert(self, upload_id: str, tenant_key: str, length: int, metadata: str, filename: str, created_ns: int) -> float:
        """A new empty upload; its creation time (Unix time, the database's clock)."""
        rows = self.database.changed_rows(self._insert, (upload_id, tenant_key, length, metadata, filename, created_ns))
        return float(rows[0][0])

    def get(self, tenant_key: str, upload_id: str) -> UploadRow | None:
        """The tenant's upload (expired or not), or None."""
        query = f"SELECT {self._columns} FROM onnx_resumable_uploads WHERE id = %s AND tenant_key = %s"
        return _row(self.database.one(query, (self.expiry, upload_id, tenant_key)))

    def take(self, tenant_key: str, upload_id: str, token: str, *, force: bool = False) -> UploadRow | None:
        """Hold the tenant's live upload under `token`, unless another's lease is
        alive (and not `force`); None then (or none such)."""
        params = (token, self.lease_seconds, upload_id, tenant_key, force, self.expiry, self.expiry)
        rows = self.database.changed_rows(self._take, params, durable=False)  # a lease a power cut loses is one that lapsed
        return _row(rows[0]) if rows else None

    def renew(self, upload_id: str, token: str) -> bool:
        """Extend the lease (bytes came: a write); False if the token no longer holds the row."""
        return self.database.change(self._renew, (self.lease_seconds, upload_id, token), durable=False) > 0

    def add_part(self, upload_id: str, token: str, number: int, size: int) -> bool:
        """Record a part put, in one transaction with the row's bytes; False if the token no longer holds the row."""
        with self.database.transaction():
            if self.database.change(self._add_part, (size, number + 1, self.lease_seconds, upload_id, token)) == 0:
                return False
            insert = "INSERT INTO onnx_resumable_parts (upload_id, number, size) VALUES (%s, %s, %s)"
            self.database.change(insert, (upload_id, number, size))
            return True

    def release(self, upload_id: str, token: str, *, touch: bool) -> float | None:
        """Let go of the lease (`touch`: the PATCH counts as a write); the last write, None if not held."""
        rows = self.database.changed_rows(self._release, (touch, upload_id, token), durable=False)
        return float(rows[0][0]) if rows else None

    def exists(self, upload_id: str) -> bool:
        return self.database.one("SELECT 1 FROM onnx_resumable_uploads WHERE id = %s", (upload_id,)) is not None

    def parts(self, upload_id: str) -> list[tuple[int, int]]:
        """(number, size) of the recorded parts, in order."""
        rows = self.database.rows("SELECT number, size FROM onnx_resumable_parts WHERE upload_id = %s ORDER BY number", (upload_id,))
        return [(int(number), int(size)) for number, size in rows]

    def delete(self, upload_id: str) -> bool:
        """The row and its parts' (SQLite keeps no foreign key's cascade unless asked: both, in one transaction)."""
        with self.database.transaction():
            self.database.change("DELETE FROM onnx_resumable_parts WHERE upload_id = %s", (upload_id,))
            return self.database.change("DELETE FROM onnx_resumable_uploads WHERE id = %s", (upload_id,)) > 0

    def expired(self, upload_id: str) -> list[UploadRow]:
        """The expired uploads no live lease holds (`upload_id`'s only, unless '')."""
        rows = self.database.rows(self._expired, (self.expiry, self.expiry, upload_id, upload_id))
        return [row for values in rows if (row := _row(values)) is not None]
