"""The local store's index: the SQL index in one SQLite file in the store's folder.

Owns `SqliteIndex` (`service.store.interface.Index`): `SqlIndex`'s queries
over `SqliteDatabase` at `<store>/index.sqlite`, migrated as it opens
(`service.store.sqlite.schema`, which carries over an older store's file
index once). `locked()` holds the database's write lock, which every
process sharing the store's folder waits for.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path

from service.store.sql.index import SqlIndex
from service.store.sqlite.database import SqliteDatabase
from service.store.sqlite.schema import migrate

INDEX_FILE = "index.sqlite"


class SqliteIndex(SqlIndex):
    def __init__(self, store: Path) -> None:
        self.store = store
        self.database: SqliteDatabase = SqliteDatabase(store / INDEX_FILE)
        super().__init__(self.database)

    def open(self) -> None:
        self.store.mkdir(parents=True, exist_ok=True)
        self.database.open()
        with self.database.answering():
            self.migrations_applied = migrate(self.database.connection(), self.store)

    def close(self) -> None:
        self.database.close()

    def locked(self) -> AbstractContextManager[None]:
        return self.database.locked()
