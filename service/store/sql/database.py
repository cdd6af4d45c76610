"""What the SQL index needs of a database: the one seam below it.

Owns `SqlDatabase` and `Migrating`. A database runs statements with `%s`
placeholders, each in the transaction of the calling thread's locked block
if it is in one, else on its own (autocommit); `locked(key)` is that block,
exclusive across every process sharing the database (PostgreSQL: an
advisory lock per key, so creations of uploads do not wait for commits;
SQLite: its one write lock, whatever the key); `migrating()` is the
transaction the schema is brought up to date in
(`service.store.sql.schema`), one process at a time. A database that cannot
be reached raises `StorageUnavailable` naming what does not answer.
Implemented by `service.store.sqlite.sqlite_database` and
`service.store.postgres.postgres_database`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from service.store.sql.dialect import Dialect

Row = tuple[Any, ...]

# Keys of `locked` (signed 64-bit, PostgreSQL's advisory locks): the first 8 bytes of the SHA-256 of
# "onnx-import-service: the schema lock", of "... the index lock" and of "... the uploads lock".
SCHEMA_LOCK = 8046182319371317534
INDEX_LOCK = -2374340273633317047
UPLOADS_LOCK = -1617302126661238175


class Migrating(Protocol):
    """The connection a migration runs its statements on, in one transaction."""

    dialect: Dialect

    def execute(self, statement: str, params: Sequence[Any] = ()) -> list[Row]:
        """Run one statement; the rows it gives (none for most)."""

    def executemany(self, statement: str, rows: Sequence[Sequence[Any]]) -> None: ...


class SqlDatabase(Protocol):
    dialect: Dialect

    def open(self) -> None:
        """Connect (StorageUnavailable when the database does not answer)."""

    def close(self) -> None: ...

    def check(self) -> None:
        """StorageUnavailable, saying why, if the database does not answer now (readiness)."""

    def locked(self, key: int) -> AbstractContextManager[None]:
        """A transaction holding the lock `key` (re-entrant in a thread): every
        statement this thread runs inside it runs in it, committed at the end."""

    def transaction(self) -> AbstractContextManager[None]:
        """One transaction, holding no lock of its own (SQLite's is its write
        lock, as every change's): statements that must change together."""

    def migrating(self) -> AbstractContextManager[Migrating]:
        """The migrations' transaction: one process at a time brings the schema up to date."""

    def rows(self, query: str, params: Sequence[Any] = ()) -> list[Row]: ...

    def one(self, query: str, params: Sequence[Any] = ()) -> Row | None: ...

    def changed_rows(self, query: str, params: Sequence[Any] = (), *, durable: bool = True) -> list[Row]:
        """Run a change that returns rows (`RETURNING`); its rows (`durable` as `change`'s)."""

    def change(self, query: str, params: Sequence[Any] = (), *, durable: bool = True) -> int:
        """Run a change; the number of rows it changed. `durable=False`: a
        change a power cut may lose (a model's last use, a lease), which the
        database may then write without waiting for the disk."""
