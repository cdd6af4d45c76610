"""Building the tensor catalogue, in the worker.

Owns `build_catalog`: every tensor the importer's `tensor_places` walk finds,
in file order, as one row (`service.sandbox.catalog_format`), written to an
in-memory database and serialized to bytes, so the front end only copies
those bytes to the store; and `slug`, the alias rule
(`service.sandbox.catalog_format` describes it).
"""

from __future__ import annotations

import posixpath
import re
import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from importer import DataType
from importer.messages import Model
from importer.summary import element_type_name
from importer.tensor import FROM_EXTERNAL, FROM_RAW_DATA, Tensor
from importer.tensor_places import SPARSE_VALUES, TensorPlace, tensor_places
from service.checks.outcome import Finding
from service.sandbox.catalog_format import (
    COLUMNS,
    CONVERTED_FILE_KEY,
    DIAGNOSTIC_COLUMNS,
    DIAGNOSTICS_TABLE,
    INDEXES,
    MODEL_FILE_KEY,
    TABLE,
    TensorRow,
    diagnostic_row,
)

MAX_BASE_CHARS = 100
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


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


def build_catalog(model: Model, keep_rows: int, diagnostics: Sequence[Finding] = ()) -> BuiltCatalog:
    """Every tensor of `model` as a catalogue row (the first `keep_rows` also
    returned as objects); a tensor's `file` is "model" (raw_data), its external
    location (normalized), or "converted" (the bytes in `converted`). The
    check stages' findings (`diagnostics`) go in a table of their own."""
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
            f"INSERT INTO diagnostics ({DIAGNOSTIC_COLUMNS}) VALUES ({', '.join('?' * 10)})",
            (diagnostic_row(seq, finding) for seq, finding in enumerate(diagnostics)),
        )
        connection.commit()
        database = connection.serialize()
        rows = [TensorRow.from_sql(row) for row in connection.execute(f"SELECT {COLUMNS} FROM tensors ORDER BY seq LIMIT ?", (keep_rows,))]
    finally:
        connection.close()
    return BuiltCatalog(database, rows, len(places), sorted(externals), converted, shared)
