"""The operator-schema table: committed as package data, equal to a fresh generation from onnx.

tools/gen_op_schemas.py writes importer/op_schemas.json.gz from the installed
onnx; these tests regenerate it and compare, and check that the loaded table
selects the schema onnx's own registry selects.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import gen_op_schemas
import onnx
import onnx.defs
import pytest

from importer.op_schemas import OPTIONAL, SINGLE, VARIADIC, schema_table, table_bytes


def test_the_committed_table_equals_a_fresh_generation_from_the_installed_onnx() -> None:
    fresh = gen_op_schemas.encode(gen_op_schemas.build_table())
    assert table_bytes() == fresh, "regenerate it: .venv/bin/python tools/gen_op_schemas.py"
    assert gzip.decompress(gen_op_schemas.compress(fresh)) == fresh


def test_the_table_names_its_onnx_version_and_covers_the_registered_domains() -> None:
    document = json.loads(table_bytes())
    table = schema_table()
    assert table.onnx_version == onnx.__version__
    assert {row[0] for row in document["schemas"]} == {"", "ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.preview"}
    assert {domain for domain, strict in ((d, r.strict) for d, r in table.domains.items()) if strict} == {
        "",
        "ai.onnx.ml",
        "ai.onnx.training",
    }
    assert table.max_version("") == onnx.defs.onnx_opset_version()
    assert table.max_version("ai.onnx") == table.max_version("")


def test_every_schema_is_found_as_onnx_finds_it() -> None:
    table = schema_table()
    schemas = onnx.defs.get_all_schemas_with_history()
    assert len(schemas) > 600
    for expected in schemas:
        for version in (expected.since_version, expected.since_version + 1):
            try:
                reference: Any = onnx.defs.get_schema(expected.name, version, expected.domain)
            except onnx.defs.SchemaError:
                continue
            found = table.lookup(expected.domain, expected.name, version)
            assert found is not None
            assert found.since_version == reference.since_version
            assert found.deprecated == reference.deprecated
            assert (found.min_input, found.max_input, found.min_output, found.max_output) == (
                reference.min_input,
                reference.max_input,
                reference.min_output,
                reference.max_output,
            )
            assert {name: (int(spec.type), spec.required) for name, spec in found.attributes.items()} == {
                name: (int(attr.type), attr.required) for name, attr in reference.attributes.items()
            }
            assert [(p.name, p.option, p.is_homogeneous, p.types) for p in found.inputs] == [
                (p.name, int(p.option.value), p.is_homogeneous, frozenset(p.types)) for p in reference.inputs
            ]
            assert {param: set(types) for param, types in found.type_constraints.items()} == {
                c.type_param_str: set(c.allowed_type_strs) for c in reference.type_constraints
            }
    options: Any = onnx.defs.OpSchema.FormalParameterOption
    assert tuple(int(o.value) for o in options.__members__.values()) == (SINGLE, OPTIONAL, VARIADIC)


@pytest.mark.parametrize(
    ("op_type", "version", "since"), [("Relu", 21, 14), ("Relu", 5, 1), ("Gelu", 19, None), ("Gelu", 28, 20), ("NoSuchOp", 21, None)]
)
def test_lookup_selects_the_newest_schema_not_above_the_version(op_type: str, version: int, since: int | None) -> None:
    found = schema_table().lookup("", op_type, version)
    assert (found.since_version if found else None) == since


def test_what_the_checker_knows_beyond_onnx_defs_is_in_the_table() -> None:
    table = schema_table()
    batch_norm = table.lookup("", "BatchNormalization", 15)
    assert batch_norm is not None and batch_norm.output_counts == frozenset({1, 3})
    layer_norm = table.lookup("", "LayerNormalization", 17)
    assert layer_norm is not None and layer_norm.unchecked_attributes
    assert "ImageScaler" in table.experimental_ops
    assert table.elem_type_names[onnx.TensorProto.FLOAT8E4M3FN] == "float8e4m3fn"


def test_the_table_is_compact() -> None:
    assert len(table_bytes()) < 250_000
