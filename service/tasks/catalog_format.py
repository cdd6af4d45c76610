"""The tensor catalogue's format: the contract between the worker that builds
it (`service.tasks.catalog_builder`) and the store that reads it
(`service.store.catalog`).

Owns the SQLite schema (`TABLE`, `DIAGNOSTICS_TABLE` with `diagnostic_row`, `INDEXES`), the
columns, the file keys a tensor's `file` names, `TensorRow` (one row) and
`tensor_href` and `npy_href` (a tensor's URLs; the .npy form only for the
types whose raw layout is a numpy array, `NPY_DESCR`).

Each tensor has its ONNX name (any string, the empty one too) and a URL-safe
alias kept from the first versions of the API:
- the base is the tensor's name; a sparse tensor's parts are
  `<name>.values` and `<name>.indices`; an unnamed attribute tensor is
  `<node name or op_type>.<attribute name>`;
- every character outside `A-Z a-z 0-9 . _ -` becomes `_`, the base is cut to
  100 characters, and a base that is empty or starts with `.` gets a `_` prefix;
- the first tensor with a base gets the base itself, later ones
  `<base>~2`, `<base>~3`, ... (`~` never occurs in a base).

A TENSORS or SPARSE_TENSORS attribute's items past the first
`service.tasks.catalog_builder.MAX_CATALOGUED_PER_ATTRIBUTE` have no row;
they are counted all the same, in `seq` (which then skips their
positions), in the aliases above and in `shared`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import quote

from importer.diagnostics import bounded
from importer.element_types import DataType, raw_layout_dtype
from service.checks.outcome import Finding

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
    seq INTEGER PRIMARY KEY,       -- stage by stage (in the order they run), each in file order, from 0
    stage TEXT NOT NULL,           -- the check stage: schema, security, shape, runtime, smoke
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
CREATE INDEX diagnostics_by_stage ON diagnostics (stage, seq);
"""
DIAGNOSTIC_COLUMNS = "seq, stage, severity, code, message, node_name, op_type, domain, field_path, offset"


def diagnostic_row(seq: int, finding: Finding) -> tuple[object, ...]:
    """A finding as a row of the diagnostics table (DIAGNOSTIC_COLUMNS), its message bounded."""
    f = finding
    return (seq, f.stage, f.severity, f.code, bounded(f.message), f.node_name, f.op_type, f.domain, f.field_path, f.offset)


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


# .npy descr by element type name: the types whose raw layout is a numpy array
NPY_DESCR = {t.name: dtype.str for t in DataType if (dtype := raw_layout_dtype(t)) is not None}


def npy_href(href: str, elem_type: str) -> str | None:
    """The URL of a tensor's .npy form, or None for a type that has none."""
    if elem_type not in NPY_DESCR:
        return None
    return href + ("&" if "?" in href else "?") + "format=npy"
