"""The tensor catalogue of one model: an SQLite database, built in the worker.

Owns the catalogue's schema, `build_catalog` (run in the worker: every tensor
the importer's `tensor_places` walk finds, in file order, as one row, written
to an in-memory database and serialized to bytes, so the front end only copies
those bytes to the store) and `Catalog` (run in the front end: lookups and
pages, each an indexed query, so a request costs the same for a model of ten
tensors as for one of a million). A catalogue is immutable once stored, so it
is opened read-only and `immutable=1`: no locks, safe on a shared store.

Why SQLite: the standard library has it, a lookup by name or field path is an
index search without loading anything, pages are range queries, and the file
is one self-contained, portable blob the worker can produce without touching
the file system (`Connection.serialize`).

Each tensor has its ONNX name (any string, the empty one too) and a URL-safe
alias kept from the first versions of the API:
- the base is the tensor's name; a sparse tensor's parts are
  `<name>.values` and `<name>.indices`; an unnamed attribute tensor is
  `<node name or op_type>.<attribute name>`;
- every character outside `A-Z a-z 0-9 . _ -` becomes `_`, the base is cut to
  100 characters, and a base that is empty or starts with `.` gets a `_` prefix;
- the first tensor with a base gets the base itself, later ones
  `<base>~2`, `<base>~3`, ... (`~` never occurs in a base).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import sqlite3
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from importer import DataType
from importer.diagnostics import Diagnostic
from importer.messages import Model
from importer.summary import element_type_name
from importer.tensor import FROM_EXTERNAL, FROM_RAW_DATA, Tensor
from importer.tensor_places import SPARSE_VALUES, TensorPlace, tensor_places

MAX_BASE_CHARS = 100
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
MODEL_FILE_KEY = "model"  # `file` of a tensor in the model file itself
CONVERTED_FILE_KEY = "converted"  # `file` of a tensor converted by the worker (typed fields, strings)

TABLE = """
CREATE TABLE tensors (
    seq INTEGER PRIMARY KEY,       -- position in file order, from 0
    name TEXT NOT NULL,            -- the ONNX name
    alias TEXT NOT NULL,           -- the URL-safe alias
    field_path TEXT NOT NULL,      -- e.g. ModelProto.graph.node[3].attribute[0].t
    role TEXT NOT NULL,            -- initializer, sparse_values, sparse_indices or attribute
    elem_type TEXT NOT NULL,
    dims TEXT NOT NULL,            -- a JSON list
    byte_length INTEGER NOT NULL,  -- of the raw layout
    source TEXT NOT NULL,          -- raw_data, external, a typed field name, string_data or none
    file TEXT,                     -- "model", an external location, "converted"; NULL when empty
    offset INTEGER NOT NULL,       -- where the bytes start in `file`
    length INTEGER NOT NULL,       -- bytes served (STRING: the length-prefixed layout)
    shared INTEGER NOT NULL        -- how many tensors of the model have this name
);
"""
DIAGNOSTICS_TABLE = """
CREATE TABLE diagnostics (
    seq INTEGER PRIMARY KEY,       -- in file order, from 0
    severity TEXT NOT NULL,        -- error or warning
    code TEXT NOT NULL,
    message TEXT NOT NULL,
    node_name TEXT,
    op_type TEXT,
    domain TEXT,
    field_path TEXT,
    offset INTEGER
);
CREATE INDEX diagnostics_by_severity ON diagnostics (severity, seq);
"""
DIAGNOSTIC_COLUMNS = "seq, severity, code, message, node_name, op_type, domain, field_path, offset"
INDEXES = """
CREATE INDEX tensors_by_name ON tensors (name);
CREATE UNIQUE INDEX tensors_by_alias ON tensors (alias);
CREATE UNIQUE INDEX tensors_by_field_path ON tensors (field_path);
"""
COLUMNS = "seq, name, alias, field_path, role, elem_type, dims, byte_length, source, file, offset, length, shared"


@dataclass(frozen=True, slots=True)
class TensorRow:
    """One catalogue row (see TABLE)."""

    seq: int
    name: str
    alias: str
    field_path: str
    role: str
    elem_type: str
    dims: list[int]
    byte_length: int
    source: str
    file: str | None
    offset: int
    length: int
    shared: int

    @classmethod
    def from_sql(cls, row: tuple[object, ...]) -> TensorRow:
        seq, name, alias, field_path, role, elem_type, dims, byte_length, source, file, offset, length, shared = row
        return cls(
            int(seq),  # type: ignore[call-overload]
            str(name),
            str(alias),
            str(field_path),
            str(role),
            str(elem_type),
            json.loads(str(dims)),
            int(byte_length),  # type: ignore[call-overload]
            str(source),
            None if file is None else str(file),
            int(offset),  # type: ignore[call-overload]
            int(length),  # type: ignore[call-overload]
            int(shared),  # type: ignore[call-overload]
        )


def tensor_href(model_id: str, name: str, field_path: str, shared: int) -> str:
    """The URL of a tensor: its real name, percent-encoded as one path segment;
    with `?field_path=` when other tensors of the model have the same name."""
    segment = quote(name, safe="")
    if segment in (".", ".."):  # would be removed as a dot segment by clients
        segment = segment.replace(".", "%2E")
    href = f"/models/{model_id}/tensors/{segment}"
    return href if shared == 1 else f"{href}?field_path={quote(field_path, safe='')}"


# --- building (in the worker)


def slug(text: str) -> str:
    base = _UNSAFE.sub("_", text)[:MAX_BASE_CHARS]
    if not base or base.startswith("."):
        base = "_" + base
    return base


def _base_name(place: TensorPlace) -> str:
    if place.sparse is not None:
        part = "values" if place.role == SPARSE_VALUES else "indices"
        return f"{place.sparse.name or place.holder}.{part}"
    return place.tensor.name or place.holder


@dataclass(frozen=True, slots=True)
class BuiltCatalog:
    database: bytes  # the serialized SQLite database
    rows: list[TensorRow]  # the first `keep_rows` rows, for the summary
    count: int
    external_files: list[str]  # external locations the tensors use, sorted
    converted: list[memoryview | bytes]  # bytes of the "converted" file, in order
    name_counts: Counter[str]  # how many tensors have each name


def build_catalog(model: Model, keep_rows: int, diagnostics: Sequence[Diagnostic] = ()) -> BuiltCatalog:
    """Every tensor of `model` as a catalogue row (the first `keep_rows` also
    returned as objects); a tensor's `file` is "model" (raw_data), its external
    location (normalized), or "converted" (the bytes in `converted`). The
    operator check's `diagnostics` go in a table of their own."""
    places = list(tensor_places(model))
    shared = Counter(place.tensor.name for place in places)
    aliases: dict[str, int] = {}
    converted: list[memoryview | bytes] = []
    converted_bytes = 0
    externals: set[str] = set()

    def sql_row(seq: int, place: TensorPlace) -> tuple[object, ...]:
        """One row, as SQLite takes it (tuples: a row object each would
        cost a third of the build for 500,000 tensors)."""
        nonlocal converted_bytes
        tensor: Tensor = place.tensor
        base = slug(_base_name(place))
        taken = aliases[base] = aliases.get(base, 0) + 1
        alias = base if taken == 1 else f"{base}~{taken}"
        file: str | None
        offset = 0
        if tensor.source == FROM_EXTERNAL and tensor.external_data is not None:
            file = posixpath.normpath(tensor.external_data.get("location", ""))
            externals.add(file)
            offset, length = tensor.data_offset or 0, tensor.byte_length
        elif tensor.source == FROM_RAW_DATA:
            file, offset, length = MODEL_FILE_KEY, tensor.data_offset or 0, tensor.byte_length
        else:
            data = tensor.string_layout() if tensor.data_type == DataType.STRING else tensor.data
            length = len(data)
            file = CONVERTED_FILE_KEY if length else None
            if length:
                offset = converted_bytes
                converted.append(data)
                converted_bytes += length
        dims = "[" + ",".join(map(str, tensor.dims)) + "]"
        name = tensor.name
        return (
            seq, name, alias, place.field_path, place.role, type_names.get(tensor.data_type) or element_type_name(tensor.data_type), dims,
            tensor.byte_length, tensor.source, file, offset, length, shared[name],
        )  # fmt: skip

    type_names = {int(t): element_type_name(t) for t in DataType}
    connection = sqlite3.connect(":memory:")
    try:
        connection.execute("PRAGMA temp_store = MEMORY")  # the index sort must not spill to a file: the worker may write none
        connection.executescript(TABLE)
        sql_rows = (sql_row(seq, place) for seq, place in enumerate(places))
        connection.executemany(f"INSERT INTO tensors ({COLUMNS}) VALUES ({', '.join('?' * 13)})", sql_rows)
        connection.executescript(INDEXES)  # built once, after the rows: faster than row by row
        connection.executescript(DIAGNOSTICS_TABLE)
        connection.executemany(
            f"INSERT INTO diagnostics ({DIAGNOSTIC_COLUMNS}) VALUES ({', '.join('?' * 9)})",
            (
                (seq, d.severity.value, d.code.value, d.message, d.node_name, d.op_type, d.domain, d.field_path, d.offset)
                for seq, d in enumerate(diagnostics)
            ),
        )
        connection.commit()
        database = connection.serialize()
        rows = [TensorRow.from_sql(row) for row in connection.execute(f"SELECT {COLUMNS} FROM tensors ORDER BY seq LIMIT ?", (keep_rows,))]
    finally:
        connection.close()
    return BuiltCatalog(database, rows, len(places), sorted(externals), converted, shared)


# --- reading (in the front end)


class CatalogUnavailable(Exception):
    """The catalogue cannot be read (its model was deleted or evicted meanwhile)."""


class Catalog:
    """One stored catalogue, opened read-only. Safe to share between threads
    (one query at a time)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.connection: sqlite3.Connection | None = None
        self.inode: int | None = None  # of the file the connection has open
        self.lock = threading.Lock()

    def current(self) -> bool:
        """The path still holds the file opened (True while nothing is open)."""
        if self.inode is None:
            return True
        try:
            return os.stat(self.path).st_ino == self.inode
        except OSError:
            return False

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
            except sqlite3.Error as error:
                raise CatalogUnavailable(str(error)) from None

    def _rows(self, where: str, parameters: tuple[object, ...], limit: int) -> list[TensorRow]:
        _, rows = self._query(f"SELECT {COLUMNS} FROM tensors WHERE {where} ORDER BY seq LIMIT ?", (*parameters, limit))
        return [TensorRow.from_sql(row) for row in rows]

    def by_name(self, name: str, limit: int) -> list[TensorRow]:
        """Tensors with this ONNX name, in file order (at most `limit`)."""
        return self._rows("name = ?", (name,), limit)

    def by_alias(self, alias: str) -> TensorRow | None:
        found = self._rows("alias = ?", (alias,), 1)
        return found[0] if found else None

    def by_field_path(self, field_path: str) -> TensorRow | None:
        found = self._rows("field_path = ?", (field_path,), 1)
        return found[0] if found else None

    def page(self, after: int, limit: int, prefix: str) -> list[TensorRow]:
        """Up to `limit` tensors after position `after`, whose name starts with `prefix`."""
        if not prefix:
            return self._rows("seq > ?", (after,), limit)
        encoded = prefix.encode()  # compared as bytes: SQLite's text functions stop at a NUL, which a name may hold
        return self._rows("seq > ? AND substr(CAST(name AS BLOB), 1, ?) = ?", (after, len(encoded), encoded), limit)

    def diagnostics(self, after: int, limit: int, severity: str | None) -> list[dict[str, object]]:
        """Up to `limit` diagnostics after position `after`, of one severity or all."""
        where, parameters = ("seq > ? AND severity = ?", (after, severity)) if severity else ("seq > ?", (after,))
        names, rows = self._query(f"SELECT {DIAGNOSTIC_COLUMNS} FROM diagnostics WHERE {where} ORDER BY seq LIMIT ?", (*parameters, limit))
        return [dict(zip(names, row, strict=True)) for row in rows]


class OpenCatalogs:
    """The most recently used catalogues, kept open (a connection costs more
    than a lookup), one per tenant and file: a tenant's first request opens
    its own, so it is no faster for another tenant's use of the same model.
    Content-addressed and immutable, so an open one never answers wrong; a
    deleted model's are dropped when its id is forgotten, and at most every
    SWEEP_SECONDS those whose file is gone or replaced (evicted, or deleted by
    another process) are closed, so their space is freed."""

    SWEEP_SECONDS = 1.0

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self.open: OrderedDict[tuple[str, Path], Catalog] = OrderedDict()  # (tenant, file)
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

    def get(self, path: Path, tenant: str) -> Catalog:
        if time.monotonic() - self.swept > self.SWEEP_SECONDS:
            self.sweep()
        key = (tenant, path)
        with self.lock:
            catalog = self.open.get(key)
            if catalog is not None:
                self.open.move_to_end(key)
                return catalog
        catalog = Catalog(path)
        with self.lock:
            self.open[key] = catalog
            while len(self.open) > self.capacity:
                _, oldest = self.open.popitem(last=False)
                oldest.close()
        return catalog

    def forget(self, path: Path) -> None:
        """Close every tenant's connection to `path`."""
        with self.lock:
            closing = [self.open.pop(key) for key in [key for key in self.open if key[1] == path]]
        for catalog in closing:
            catalog.close()
