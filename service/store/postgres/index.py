"""The index in one PostgreSQL database, shared by every replica given its URL.

Owns `PostgresIndex`: the SQL index (`service.store.sql.index.SqlIndex`, the
queries SQLite runs too) over the pooled connections of
`service.store.postgres.database` and the tables of
`service.store.postgres.schema`. `locked()` is a transaction holding the
index's advisory lock, so changes are serialized across every process on
every machine, and each index call a thread makes inside it runs in that
transaction; calls outside it are one statement each in autocommit (reads,
`touch`, the uploads' marks). The byte total is a row a trigger keeps, exact
however many replicas write; times of uploads are the database's clock, the
one every replica shares.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from service.store.postgres.database import Database
from service.store.postgres.schema import INDEX_LOCK, migrate
from service.store.sql.index import SqlIndex, tenant_key

__all__ = ["PostgresIndex", "tenant_key"]


class PostgresIndex(SqlIndex):
    def __init__(self, url: str, *, pool_size: int = 8, timeout: float = 3.0) -> None:
        """`url`: libpq's (the password may come from PGPASSWORD or PGPASSFILE);
        `timeout`: seconds to wait for a connection, and for open()."""
        self.database: Database = Database(url, pool_size=pool_size, timeout=timeout)
        super().__init__(self.database)

    def open(self) -> None:
        """Connect (StorageUnavailable after `timeout` seconds) and migrate the schema."""
        self.database.open()
        try:
            with self.database.connection() as connection:
                self.migrations_applied = migrate(connection)
        except BaseException:
            self.database.close()
            raise

    def close(self) -> None:
        self.database.close()

    def locked(self) -> AbstractContextManager[None]:
        return self.database.locked(INDEX_LOCK)
