"""The fleet's resumable uploads in PostgreSQL: their rows, their parts, the lease of their one writer.

Owns `UploadRows` over the tables `onnx_resumable_uploads` and
`onnx_resumable_parts` (`service.store.postgres.schema`, migration 5), and `UploadRow`, one
upload as a replica reads it. Every statement is one, in autocommit, except
a creation's survey and insert (`Database.locked(UPLOADS_LOCK)`: creations
one at a time across replicas). Times are the database's clock, the one
every replica shares: the last write (the expiry counts from it) and a
lease's end.

The lease: a writer takes the row with a fresh token, without waiting
(`take`: none when another's lease is alive), and holds it while its lease
runs (`renew`); a lease left by a replica that died lapses after
`lease_seconds` and is taken over then, the part number moving one on (the
dead writer may have sent one more part under the number it was at: it is
never recorded, and never used again). Each record of the writer (a part,
the end) is conditional on its token still holding the row: a writer taken
over or removed records nothing more.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, LiteralString

from service.store.postgres.database import Database
from service.store.postgres.schema import UPLOADS_LOCK

COLUMNS: LiteralString = (
    "id, tenant_key, length, metadata, filename, parts_bytes, next_part, "
    "extract(epoch FROM last_write)::float8, last_write < now() - make_interval(secs => %s)"
)
LIVE: LiteralString = "last_write >= now() - make_interval(secs => %s)"


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

    @property
    def offset(self) -> int:
        """The bytes held durably: the recorded parts."""
        return self.parts_bytes


@dataclass(frozen=True, slots=True)
class UploadSurvey:
    """The live uploads, as a creation counts them."""

    awaited: int  # bytes every upload still awaits
    held: int  # bytes every upload holds
    tenant_open: int  # uploads of one tenant
    tenant_declared: int  # their declared lengths


def _row(values: tuple[Any, ...] | None) -> UploadRow | None:
    return None if values is None else UploadRow(*values)


class UploadRows:
    def __init__(self, database: Database, expiry: float, lease_seconds: float) -> None:
        self.database = database
        self.expiry = expiry  # seconds after the last write
        self.lease_seconds = lease_seconds

    def creating(self) -> AbstractContextManager[None]:
        """A transaction in which creations are one at a time across replicas (survey, then insert)."""
        return self.database.locked(UPLOADS_LOCK)

    def survey(self, tenant_key: str) -> UploadSurvey:
        row = self.database.one(
            "SELECT COALESCE(SUM(GREATEST(length - parts_bytes, 0)), 0), COALESCE(SUM(parts_bytes), 0), "
            "COUNT(*) FILTER (WHERE tenant_key = %s), COALESCE(SUM(length) FILTER (WHERE tenant_key = %s), 0) "
            "FROM onnx_resumable_uploads WHERE " + LIVE,
            (tenant_key, tenant_key, self.expiry),
        )
        assert row is not None
        return UploadSurvey(*(int(value) for value in row))

    def insert(self, upload_id: str, tenant_key: str, length: int, metadata: str, filename: str, created_ns: int) -> float:
        """A new empty upload; its creation time (Unix time, the database's clock)."""
        row = self.database.one(
            "INSERT INTO onnx_resumable_uploads (id, tenant_key, length, metadata, filename, created_ns) VALUES (%s, %s, %s, %s, %s, %s) "
            "RETURNING extract(epoch FROM last_write)::float8",
            (upload_id, tenant_key, length, metadata, filename, created_ns),
        )
        assert row is not None
        return float(row[0])

    def get(self, tenant_key: str, upload_id: str) -> UploadRow | None:
        """The tenant's upload (expired or not), or None."""
        query: LiteralString = "SELECT " + COLUMNS + " FROM onnx_resumable_uploads WHERE id = %s AND tenant_key = %s"
        return _row(self.database.one(query, (self.expiry, upload_id, tenant_key)))

    def take(self, tenant_key: str, upload_id: str, token: str) -> UploadRow | None:
        """Hold the tenant's live upload under `token`, unless another's lease is alive; None then (or none such)."""
        query: LiteralString = (
            "UPDATE onnx_resumable_uploads SET lease = %s, lease_until = now() + make_interval(secs => %s), "
            "next_part = next_part + CASE WHEN lease <> '' THEN 1 ELSE 0 END "  # taken over: the dead writer's part number is not reused
            "WHERE id = %s AND tenant_key = %s AND (lease = '' OR lease_until < now()) AND " + LIVE + " RETURNING " + COLUMNS
        )
        return _row(self.database.one(query, (token, self.lease_seconds, upload_id, tenant_key, self.expiry, self.expiry)))

    def renew(self, upload_id: str, token: str) -> bool:
        """Extend the lease; False if the token no longer holds the row."""
        return self._held_change("", upload_id, token) > 0

    def _held_change(self, sets: LiteralString, upload_id: str, token: str, params: tuple[Any, ...] = ()) -> int:
        query: LiteralString = (
            "UPDATE onnx_resumable_uploads SET " + sets + "lease_until = now() + make_interval(secs => %s) WHERE id = %s AND lease = %s"
        )
        return self.database.change(query, (*params, self.lease_seconds, upload_id, token))

    def add_part(self, upload_id: str, token: str, number: int, size: int) -> bool:
        """Record a part put; False if the token no longer holds the row."""
        changed = self.database.change(
            "WITH held AS ("
            "  UPDATE onnx_resumable_uploads SET parts_bytes = parts_bytes + %s, next_part = %s, "
            "  last_write = now(), lease_until = now() + make_interval(secs => %s) WHERE id = %s AND lease = %s RETURNING id"
            ") INSERT INTO onnx_resumable_parts (upload_id, number, size) SELECT id, %s, %s FROM held",
            (size, number + 1, self.lease_seconds, upload_id, token, number, size),
        )
        return changed > 0

    def release(self, upload_id: str, token: str, *, touch: bool) -> float | None:
        """Let go of the lease (`touch`: a write without bytes, counted as one); the last write, None if not held."""
        row = self.database.one(
            "UPDATE onnx_resumable_uploads SET lease = '', lease_until = '-infinity', "
            "last_write = CASE WHEN %s THEN now() ELSE last_write END WHERE id = %s AND lease = %s "
            "RETURNING extract(epoch FROM last_write)::float8",
            (touch, upload_id, token),
        )
        return None if row is None else float(row[0])

    def exists(self, upload_id: str) -> bool:
        return self.database.one("SELECT 1 FROM onnx_resumable_uploads WHERE id = %s", (upload_id,)) is not None

    def parts(self, upload_id: str) -> list[tuple[int, int]]:
        """(number, size) of the recorded parts, in order."""
        rows = self.database.rows("SELECT number, size FROM onnx_resumable_parts WHERE upload_id = %s ORDER BY number", (upload_id,))
        return [(int(number), int(size)) for number, size in rows]

    def delete(self, upload_id: str) -> bool:
        return self.database.change("DELETE FROM onnx_resumable_uploads WHERE id = %s", (upload_id,)) > 0

    def expired(self, upload_id: str) -> list[UploadRow]:
        """The expired uploads no live lease holds (`upload_id`'s only, unless '')."""
        query: LiteralString = (
            "SELECT " + COLUMNS + " FROM onnx_resumable_uploads WHERE last_write < now() - make_interval(secs => %s) "
            "AND (lease = '' OR lease_until < now()) AND (%s = '' OR id = %s) ORDER BY last_write LIMIT 1000"
        )
        return [UploadRow(*values) for values in self.database.rows(query, (self.expiry, self.expiry, upload_id, upload_id))]
