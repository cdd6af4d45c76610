"""What the SQL index needs of a database connection.

Owns `SqlDatabase`: statements with `%s` placeholders, each run in the
transaction of the calling thread's locked block if it is in one, else on
its own (autocommit); a database that cannot be reached raises
`StorageUnavailable`. Implemented by `service.store.sqlite.database` and
`service.store.postgres.database`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from service.store.sql.dialect import Dialect

Row = tuple[Any, ...]


class SqlDatabase(Protocol):
    dialect: Dialect

    def rows(self, query: str, params: Sequence[Any] = ()) -> list[Row]: ...

    def one(self, query: str, params: Sequence[Any] = ()) -> Row | None: ...

    def change(self, query: str, params: Sequence[Any] = (), *, durable: bool = True) -> int:
        """Run a change; the number of rows it changed. `durable=False`: a
        change a power cut may lose (a model's last use), which the database
        may then write without waiting for the disk."""
