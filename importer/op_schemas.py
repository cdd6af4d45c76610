"""The operator-schema table: ONNX's operator schemas, with their history, as package data.

Owns loading `importer/op_schemas.json.gz` (written by tools/gen_op_schemas.py
from the `onnx` package, whose version it names; see that script for the
layout) and looking schemas up: `schema_table()` loads it once, lazily, on
first use (about 14 KB compressed; a caller that forks workers may call it
first so that they share it), and `SchemaTable.lookup` selects the schema in
force for a domain, an op and an imported opset version the way ONNX's
registry does: the one with the highest `since_version` not above it. Rows
become `OpSchema` objects (named tuples: a thousand of them are made in a
few milliseconds) only when first looked up. Nothing here imports
`onnx`; the table is read as package data (the package's loader, through
pkgutil), not as a user's file.
"""

from __future__ import annotations

import bisect
import functools
from typing import Any, Final, NamedTuple

from importer.attribute_types import AttributeType
from importer.resolve import normalize_domain

TABLE_RESOURCE: Final = "op_schemas.json.gz"
TABLE_FORMAT: Final = "importer-op-schemas/1"

# FormalParameter.option
SINGLE: Final = 0
OPTIONAL: Final = 1
VARIADIC: Final = 2


class FormalParameter(NamedTuple):
    """One declared input or output. `types`: the type strings it accepts
    ("tensor(float)", "seq(tensor(int64))", ...), as the checker spells them."""

    name: str
    option: int  # SINGLE, OPTIONAL or VARIADIC
    is_homogeneous: bool
    min_arity: int
    type_str: str  # a type parameter ("T") or one type
    types: frozenset[str]


class AttributeSpec(NamedTuple):
    name: str
    type: AttributeType
    required: bool


class OpSchema(NamedTuple):
    """One version of one operator. `input_counts`/`output_counts`: the only
    counts allowed within [min, max], when the schema restricts them."""

    domain: str
    name: str
    since_version: int
    deprecated: bool
    min_input: int
    max_input: int
    min_output: int
    max_output: int
    input_counts: frozenset[int] | None
    output_counts: frozenset[int] | None
    unchecked_attributes: bool
    inputs: tuple[FormalParameter, ...]
    outputs: tuple[FormalParameter, ...]
    attributes: dict[str, AttributeSpec]
    type_constraints: dict[str, tuple[str, ...]]


class DomainRange(NamedTuple):
    """The opset versions the table knows for a domain. `strict`: the checker
    refuses an op it has no schema for there (the others are custom domains to it)."""

    min_version: int
    max_version: int
    strict: bool


class SchemaTable:
    """The loaded table. `onnx_version`: the onnx release it was generated from."""

    __slots__ = (
        "onnx_version",
        "domains",
        "domain_max_versions",
        "experimental_ops",
        "elem_type_names",
        "_type_sets",
        "_rows",
        "_since",
        "_compiled",
    )

    def __init__(self, document: dict[str, Any]) -> None:
        if document.get("format") != TABLE_FORMAT:
            raise ValueError(f"operator-schema table format {document.get('format')!r}, expected {TABLE_FORMAT!r}")
        self.onnx_version: str = document["onnx_version"]
        self.domains = {domain: DomainRange(low, high, strict) for domain, low, high, strict in document["domains"]}
        self.domain_max_versions = {domain: found.max_version for domain, found in self.domains.items()}
        self.experimental_ops = frozenset(document["experimental_ops"])
        self.elem_type_names: dict[int, str] = {code: name for code, name in document["elem_types"]}
        self._type_sets: list[frozenset[str]] = [frozenset(types) for types in document["type_sets"]]
        layout = document["schema_layout"]
        domain_at, name_at, since_at = layout.index("domain"), layout.index("name"), layout.index("since_version")
        self._rows: dict[tuple[str, str], list[list[Any]]] = {}
        for row in document["schemas"]:  # sorted by (domain, name, since_version)
            self._rows.setdefault((row[domain_at], row[name_at]), []).append(row)
        self._since = {key: [row[since_at] for row in rows] for key, rows in self._rows.items()}
        self._compiled: dict[tuple[str, str, int], OpSchema] = {}

    def lookup(self, domain: str, op_type: str, version: int) -> OpSchema | None:
        """The schema in force at `version`, or None when the op is not
        defined there (unknown, or only defined from a later version)."""
        key = (normalize_domain(domain), op_type)
        since = self._since.get(key)
        if since is None:
            return None
        position = bisect.bisect_right(since, version) - 1
        if position < 0:
            return None
        cache_key = (key[0], op_type, since[position])
        schema = self._compiled.get(cache_key)
        if schema is None:
            schema = self._compile(self._rows[key][position])
            self._compiled[cache_key] = schema
        return schema

    def first_version(self, domain: str, op_type: str) -> int | None:
        """The earliest since_version of an op, or None when the table does not know it."""
        since = self._since.get((normalize_domain(domain), op_type))
        return since[0] if since else None

    def max_version(self, domain: str) -> int | None:
        found = self.domains.get(normalize_domain(domain))
        return found.max_version if found is not None else None

    def _compile(self, row: list[Any]) -> OpSchema:
        (domain, name, since, deprecated, min_in, max_in, min_out, max_out, in_counts, out_counts, unchecked,
         inputs, outputs, attributes, constraints) = row  # fmt: skip
        return OpSchema(
            domain=domain,
            name=name,
            since_version=since,
            deprecated=deprecated,
            min_input=min_in,
            max_input=max_in,
            min_output=min_out,
            max_output=max_out,
            input_counts=frozenset(in_counts) if in_counts is not None else None,
            output_counts=frozenset(out_counts) if out_counts is not None else None,
            unchecked_attributes=unchecked,
            inputs=tuple(self._parameter(param) for param in inputs),
            outputs=tuple(self._parameter(param) for param in outputs),
            attributes={a_name: AttributeSpec(a_name, AttributeType(a_type), required) for a_name, a_type, required in attributes},
            type_constraints={param: tuple(sorted(self._type_sets[index])) for param, index in constraints},
        )

    def _parameter(self, row: list[Any]) -> FormalParameter:
        name, option, homogeneous, min_arity, type_str, types = row
        return FormalParameter(name, option, homogeneous, min_arity, type_str, self._type_sets[types])


def table_bytes() -> bytes:
    """The table's JSON document, as generated (decompressed)."""
    import gzip  # here, not at the top: only loading the table needs them
    import pkgutil  # the package's loader reads its data: ten times cheaper to import than importlib.resources

    data = pkgutil.get_data("importer", TABLE_RESOURCE)
    if data is None:
        raise FileNotFoundError(f"the package data {TABLE_RESOURCE} of importer cannot be read")
    return gzip.decompress(data)


@functools.cache
def schema_table() -> SchemaTable:
    """The table, loaded on first use and kept for the process."""
    import json

    return SchemaTable(json.loads(table_bytes()))
