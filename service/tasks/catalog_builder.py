"""Building the tensor catalogue, in the worker.

Owns `build_catalog`: every tensor the importer's `tensor_places` walk finds,
in file order, as one row (`service.tasks.catalog_format`), written to an
in-memory database and serialized to bytes, so the front end only copies
those bytes to the store; and `slug`, the alias rule
(`service.tasks.catalog_format` describes it).

A row costs some 200 bytes with its indexes, and an empty tensor in a
TENSORS attribute 6 bytes of protobuf: of a TENSORS or SPARSE_TENSORS
attribute only the first MAX_CATALOGUED_PER_ATTRIBUTE items get rows (and
their bytes converted); the others are counted (`BuiltCatalog.not_catalogued`,
the summary's `tensors_not_catalogued`), never stored, so they are not found
by name. They keep their places all the same: `seq` stays the position in
file order, each alias and `shared` are those every tensor counted gives (as
the graph document's hrefs are), and the external files they read are in
`external_files` (what the import records, checks and derives the id from).
"""

from __future__ import annotations

import posixpath
import re
import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from importer import DataType
from importer.attribute_types import TYPE_INFO, ValueKind
from importer.messages import Model
from importer.summary import element_type_name
from importer.tensor import FROM_EXTERNAL, FROM_RAW_DATA, Tensor
from importer.tensor_places import SPARSE_VALUES, TensorPlace, tensor_places
from service.checks.outcome import Finding
from service.tasks.catalog_format import (
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
MAX_CATALOGUED_PER_ATTRIBUTE = 1000  # items of a TENSORS or SPARSE_TENSORS attribute given rows; the rest are only counted
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_PLURAL_FIELDS = "|".join(
    info.field for info in TYPE_INFO.values() if info.plural and info.kind in (ValueKind.TENSOR, ValueKind.SPARSE_TENSOR)
)  # tensors, sparse_tensors
_PLURAL_ITEM = re.compile(rf"\.(?:{_PLURAL_FIELDS})\[(\d+)\](?:\.values|\.indices)?$")  # the end of such an item's field path


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


def catalogued(place: TensorPlace) -> bool:
    """Whether `place` gets a row: not an item of a plural tensor attribute past its first MAX_CATALOGUED_PER_ATTRIBUTE."""
    if not place.holder:  # an initializer or a sparse initializer's part
        return True
    item = _PLURAL_ITEM.search(place.field_path)
    return item is None or int(item.group(1)) < MAX_CATALOGUED_PER_ATTRIBUTE


@dataclass(frozen=True, slots=True)
class BuiltCatalog:
    database: bytes  # the serialized SQLite database
    rows: list[TensorRow]  # the first `keep_rows` rows, for the summary
    count: int  # rows: the tensors catalogued
    external_files: list[str]  # external locations the tensors use (catalogued or not), sorted
    converted: list[memoryview | bytes]  # bytes of the "converted" file, in order
    name_counts: Counter[str]  # how many tensors have each name (every tensor, catalogued or not)
    not_catalogued: int = 0  # tensors past MAX_CATALOGUED_PER_ATTRIBUTE in their attribute: no row


def build_catalog(model: Model, keep_rows: int, diagnostics: Sequence[Finding] = ()) -> BuiltCatalog:
    """Every tensor of `model` as a catalogue row (the first `keep_rows` also
    returned as objects), but those `catalogued` refuses; a tensor's `file` is
    "model" (raw_data), its external location (normalized), or "converted"
    (the bytes in `converted`). The check stages' findings (`diagnostics`) go
    in a table of their own."""
    places = list(tensor_places(model))
    shared = Counter(place.tensor.name for place in places)
    aliases: dict[str, int] = {}
    converted: list[memoryview | bytes] = []
    converted_bytes = 0
    externals: set[str] = set()
    left_out = 0

    def sql_row(seq: int, place: TensorPlace) -> tuple[object, ...] | None:
        """One row, as SQLite takes it (tuples: a row object each would
        cost a third of the build for 500,000 tensors); None for a tensor
        not catalogued, whose alias and external file are counted all the
        same (the files an import records, checks and names its id by are
        those every tensor reads)."""
        nonlocal converted_bytes, left_out
        tensor: Tensor = place.tensor
        base = slug(_base_name(place))
        taken = aliases[base] = aliases.get(base, 0) + 1
        external = None
        if tensor.source == FROM_EXTERNAL and tensor.external_data is not None:
            external = posixpath.normpath(tensor.external_data.get("location", ""))
            externals.add(external)
        if not catalogued(place):
            left_out += 1
            return None
        alias = base if taken == 1 else f"{base}~{taken}"
        file: str | None
        offset = 0
        if external is not None:
            file, offset, length = external, tensor.data_offset or 0, tensor.byte_length
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
        sql_rows = (row for seq, place in enumerate(places) if (row := sql_row(seq, place)) is not None)
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
    return BuiltCatalog(database, rows, len(places) - left_out, sorted(externals), converted, shared, left_out)
