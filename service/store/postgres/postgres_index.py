"""The index in one PostgreSQL database, shared by every replica given its URL.

Owns `PostgresIndex`: `service.store.sql.index.SqlIndex` (the queries and
migrations SQLite runs too) over the pooled connections of
`service.store.postgres.postgres_database`. Its `locked()` is a transaction holding
the index's advisory lock, so changes are serialized across every process
on every machine; calls outside it are one statement each in autocommit.
The byte total is a row a trigger keeps, exact however many replicas
write; times of uploads are the database's clock, the one every replica shares.
"""

from __future__ import annotations

from pathlib import Path

from service.store.postgres.postgres_database import Database
from service.store.sql.index import SqlIndex, tenant_key

__all__ = ["PostgresIndex", "tenant_key"]


class PostgresIndex(SqlIndex):
    def __init__(self, url: str, *, pool_size: int = 8, timeout: float = 3.0, folder: Path | None = None) -> None:
        """`url`: libpq's (the password may come from PGPASSWORD or PGPASSFILE);
        `timeout`: seconds to wait for a connection, and for open(); `folder`:
        a folder store's, whose older layouts the migrations carry over."""
        self.database: Database = Database(url, pool_size=pool_size, timeout=timeout)
        super().__init__(self.database, folder)
