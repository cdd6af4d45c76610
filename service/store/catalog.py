"""Reading a stored tensor catalogue, in the front end.

Owns `Catalog` (lookups and pages, each an indexed query, so a request costs
the same for a model of ten tensors as for one of a million; a lookup's rows
are remembered, a bounded few per catalogue) and
`OpenCatalogs` (the catalogues kept open); the value types the `shape`
stage inferred too (`service.store.catalog_shapes`). A catalogue is immutable once
stored, so it is opened read-only and `immutable=1`: no locks, safe on a
shared store. Its format: `service.tasks.catalog_format`.

Why SQLite: the standard library has it, a lookup by name or field path is an
index search without loading anything, pages are range queries, and the file
is one self-contained, portable blob the worker can produce without touching
the file system (`Connection.serialize`).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from service.store.catalog_shapes import INFERRED_TABLE
from service.store.memo import Memo
from service.tasks.catalog_format import COLUMNS, DIAGNOSTIC_COLUMNS, TensorRow

LOOKUPS_KEPT = 256  # lookups remembered per open catalogue (a name holds at most MAX_CANDIDATES rows)


class CatalogUnavailable(Exception):
    """The catalogue cannot be read (its model was deleted or evicted meanwhile)."""


class Catalog:
    """One stored catalogue, opened read-only. Safe to share between threads
    (one query at a time)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.connection: sqlite3.Connection | None = None
        self.inode: int | None = None  # of the file the connection has open
        self.stages: bool | None = None  # whether its diagnostics have a stage column (catalogues since the check stages)
        self.lock = threading.Lock()
        self.lookups: Memo[tuple[str, str, int], list[TensorRow]] = Memo(LOOKUPS_KEPT)  # (condition, value, limit) -> rows

    def current(self) -> bool:
        """The path still holds the file opened (while nothing is open: a
        file, so a catalogue whose file went before its first query is swept)."""
        try:
            inode = os.stat(self.path).st_ino
        except OSError:
            return False
        return self.inode is None or inode == self.inode

    def close(self) -> None:
        """Close the connection; a later query opens it again."""
        with self.lock:
            if self.connection is not None:
                self.connection.close()
                self.connection = None
                self.inode = None

    def _query(self, sql: str, parameters: tuple[object, ...]) -> tuple[list[str], list[tuple[object, ...]]]:
        """Column names and rows of one query (the connection opened on first use)."""
        with self.lock:
            try:
                if self.connection is None:
                    uri = f"{self.path.as_uri()}?mode=ro&immutable=1"
                    self.inode = os.stat(self.path).st_ino
                    self.connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
                cursor = self.connection.execute(sql, parameters)
                return [column[0] for column in cursor.description], cursor.fetchall()
            except (sqlite3.Error, FileNotFoundError) as error:  # gone before it was opened: removed, evicted
                raise CatalogUnavailable(str(error)) from None

    def _rows(self, where: str, parameters: tuple[object, ...], limit: int) -> list[TensorRow]:
        _, rows = self._query(f"SELECT {COLUMNS} FROM tensors WHERE {where} ORDER BY seq LIMIT ?", (*parameters, limit))
        return [TensorRow.from_sql(row) for row in rows]

    def _cached_rows(self, where: str, value: str, limit: int) -> list[TensorRow]:
        """`_rows` of one lookup, remembered (the catalogue never changes):
        a tensor fetched again costs a dictionary lookup, not a query."""
        return self.lookups.get((where, value, limit), lambda: self._rows(where, (value,), limit))

    def by_name(self, name: str, limit: int) -> list[TensorRow]:
        """Tensors with this ONNX name, in file order (at most `limit`)."""
        return self._cached_rows("name = ?", name, limit)

    def by_alias(self, alias: str) -> TensorRow | None:
        found = self._cached_rows("alias = ?", alias, 1)
        return found[0] if found else None

    def by_field_path(self, field_path: str) -> TensorRow | None:
        found = self._cached_rows("field_path = ?", field_path, 1)
        return found[0] if found else None

    def page(self, after: int, limit: int, prefix: str) -> list[TensorRow]:
        """Up to `limit` tensors after position `after`, whose name starts with `prefix`."""
        if not prefix:
            return self._rows("seq > ?", (after,), limit)
        encoded = prefix.encode()  # compared as bytes: SQLite's text functions stop at a NUL, which a name may hold
        return self._rows("seq > ? AND substr(CAST(name AS BLOB), 1, ?) = ?", (after, len(encoded), encoded), limit)

    def diagnostics(self, after: int, limit: int, severity: str | None, stage: str | None = None) -> list[dict[str, object]]:
        """Up to `limit` diagnostics after position `after`, of one severity and one stage, or all.
        A catalogue from before the check stages holds the operator check's only (stage `schema`)."""
        conditions: list[str] = ["seq > ?"]
        parameters: list[object] = [after]
        columns = DIAGNOSTIC_COLUMNS
        if not self._has_stages():
            columns = DIAGNOSTIC_COLUMNS.replace("stage,", "'schema' AS stage,")
            if stage not in (None, "schema"):
                return []
            stage = None
        for column, value in (("severity", severity), ("stage", stage)):
            if value:
                conditions.append(f"{column} = ?")
                parameters.append(value)
        sql = f"SELECT {columns} FROM diagnostics WHERE {' AND '.join(conditions)} ORDER BY seq LIMIT ?"
        names, rows = self._query(sql, (*parameters, limit))
        return [dict(zip(names, row, strict=True)) for row in rows]

    def inferred_types(self) -> str:
        """The JSON list of {name, type} of the values the `shape` stage
        inferred a type for, in the graph's order; "[]" from a catalogue without them."""
        _, tables = self._query("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?", (INFERRED_TABLE,))
        if not tables:
            return "[]"
        _, rows = self._query(f"SELECT document FROM {INFERRED_TABLE} LIMIT 1", ())
        if not rows or not isinstance(rows[0][0], bytes):
            return "[]"
        try:
            return zlib.decompress(rows[0][0]).decode()  # written by the front end (catalog_shapes): its own compression
        except (zlib.error, UnicodeDecodeError):
            return "[]"

    def _has_stages(self) -> bool:
        if self.stages is None:
            _, rows = self._query("SELECT name FROM pragma_table_info('diagnostics')", ())
            self.stages = any(row[0] == "stage" for row in rows)
        return self.stages


class OpenCatalogs:
    """The most recently used catalogues, kept open (a connection costs more
    than a lookup), one per tenant and content place: a tenant's first request opens
    its own, so it is no faster for another tenant's use of the same model.
    Content-addressed and immutable, so an open one never answers wrong; a
    deleted model's are dropped when its id is forgotten, and at most every
    SWEEP_SECONDS those whose file is gone or replaced (evicted, or deleted by
    another process) are closed, so their space is freed."""

    SWEEP_SECONDS = 1.0

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self.open: OrderedDict[tuple[str, str], Catalog] = OrderedDict()  # (tenant, content place)
        self.lock = threading.Lock()
        self.swept = time.monotonic()

    def sweep(self) -> None:
        """Close the catalogues whose file is no longer the one opened."""
        with self.lock:
            self.swept = time.monotonic()
            gone = [key for key, catalog in self.open.items() if not catalog.current()]
            closing = [self.open.pop(key) for key in gone]
        for catalog in closing:
            catalog.close()

    def get(self, place: str, tenant: str, path: Callable[[], Path]) -> Catalog:
        """The tenant's catalogue of the content at `place`; `path()` gives its
        file (called only when it is not open: a remote backend fetches it)."""
        if time.monotonic() - self.swept > self.SWEEP_SECONDS:
            self.sweep()
        key = (tenant, place)
        with self.lock:
            catalog = self.open.get(key)
            if catalog is not None:
                self.open.move_to_end(key)
                return catalog
        catalog = Catalog(path())
        with self.lock:
            self.open[key] = catalog
            while len(self.open) > self.capacity:
                _, oldest = self.open.popitem(last=False)
                oldest.close()
        return catalog
