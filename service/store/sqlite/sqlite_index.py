"""The local store's index: the SQL index in one SQLite file in the store's folder.

Owns `SqliteIndex`: `service.store.sql.index.SqlIndex` over
`SqliteDatabase` at `<store>/index.sqlite`, its migrations carrying the
older layouts of that folder over once (`service.store.sql.schema`).
"""

from __future__ import annotations

from pathlib import Path

from service.store.sql.index import SqlIndex
from service.store.sqlite.sqlite_database import SqliteDatabase

INDEX_FILE = "index.sqlite"


class SqliteIndex(SqlIndex):
    def __init__(self, store: Path) -> None:
        self.database: SqliteDatabase = SqliteDatabase(store / INDEX_FILE)
        super().__init__(self.database, store)
