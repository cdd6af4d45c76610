"""The model summary served by `GET /models/{id}`: bounded, whatever the model.

Owns `bounded_summary` (in the worker: producer, opsets, the graph's inputs,
outputs, op-type counts, initializers, functions, metadata, the first
tensors of the catalogue, and the check stages' error and warning counts
with its first diagnostics; every list is cut at a number of items and a number
of bytes, and `counts` gives every list's full length, `truncated` names the
cut ones). The front end adds the id, the model file and the links
(`service.imports.summary`). The complete tensor list is paged from
`GET /models/{id}/tensors`; `counts["tensors"]` is its length, and
`tensors_not_catalogued` (only when there are any) the tensors the catalogue
gives no row (`service.tasks.catalog_builder.MAX_CATALOGUED_PER_ATTRIBUTE`).
"""

from __future__ import annotations

import json
import posixpath
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from importer import OnnxModel
from importer.summary import describe_model, describe_tensor, describe_value, op_type_key
from importer.tensor import FROM_EXTERNAL, FROM_RAW_DATA, Tensor
from service.checks.outcome import Finding
from service.tasks.catalog_builder import BuiltCatalog
from service.tasks.catalog_format import TensorRow

MAX_LIST_BYTES = 192 << 10  # per list: ten lists stay under 2 MB
MAX_NAMED_ITEMS = 1000  # inputs, outputs, op types, functions, metadata
Json = Any


def _bounded(items: Iterable[Json], max_items: int) -> list[Json]:
    """The first items that fit `max_items` and MAX_LIST_BYTES."""
    kept: list[Json] = []
    used = 0
    for item in items:
        used += len(json.dumps(item, allow_nan=False)) + 1
        if len(kept) == max_items or used > MAX_LIST_BYTES:
            break
        kept.append(item)
    return kept


def _located(tensor: Tensor, field_path: str, name_counts: Counter[str]) -> Json:
    """describe_tensor, with its field path, an external file named by its
    location (a raw_data tensor's file is the model itself: no name, since the
    name a client gave the model is that request's own), and how many tensors
    share its name (for its href)."""
    item = describe_tensor(tensor)
    item["field_path"] = field_path
    item["shared"] = name_counts[tensor.name]
    location = item["location"]
    if tensor.source == FROM_RAW_DATA:
        del location["file"]  # the model file itself (named by `input`, which is each request's own)
    elif tensor.source == FROM_EXTERNAL and tensor.external_data is not None:
        location["file"] = posixpath.normpath(tensor.external_data.get("location", ""))
    return item


def _row_entry(row: TensorRow) -> Json:
    return {
        "name": row.name,
        "alias": row.alias,
        "field_path": row.field_path,
        "role": row.role,
        "elem_type": row.elem_type,
        "dims": row.dims,
        "byte_length": row.byte_length,
        "source": row.source,
        "shared": row.shared,
    }


def bounded_summary(
    model: OnnxModel, display_name: str, catalog: BuiltCatalog, max_tensors: int, diagnostics: Sequence[Finding] = ()
) -> Json:
    """The summary without id and links (see the module comment)."""
    counted = catalog.name_counts
    graph = model.graph
    proto = model.proto
    parsed = proto.graph
    initializers = parsed.initializer if parsed is not None else []
    sparse = parsed.sparse_initializer if parsed is not None else []
    counts: dict[str, int] = {}
    truncated: list[str] = []

    def listed(name: str, items: Iterable[Json], total: int, max_items: int) -> list[Json]:
        kept = _bounded(items, max_items)
        counts[name] = total
        if len(kept) < total:
            truncated.append(name)
        return kept

    op_counter = Counter(op_type_key(n.domain, n.op_type) for n in graph.nodes)
    op_types = listed("op_types", ([k, v] for k, v in sorted(op_counter.items())), len(op_counter), MAX_NAMED_ITEMS)
    metadata = listed("metadata_props", ([e.key, e.value] for e in proto.metadata_props), len(proto.metadata_props), MAX_NAMED_ITEMS)
    functions = (
        {"domain": f.domain, "name": f.name, "overload": f.overload, "inputs": f.input, "outputs": f.output, "node_count": len(f.node)}
        for f in model.functions
    )
    sparse_items = (
        {
            "name": s.name,
            "dims": list(s.dims),
            "values": _located(s.values, f"ModelProto.graph.sparse_initializer[{index}].values", counted),
            "indices": _located(s.indices, f"ModelProto.graph.sparse_initializer[{index}].indices", counted),
        }
        for index, s in enumerate(sparse)
    )
    return {
        "input": display_name,
        **describe_model(model),
        "graph": {
            "name": graph.name,
            "inputs": listed("inputs", (describe_value(v) for v in graph.inputs), len(graph.inputs), MAX_NAMED_ITEMS),
            "outputs": listed("outputs", (describe_value(v) for v in graph.outputs), len(graph.outputs), MAX_NAMED_ITEMS),
            "node_count": len(graph.nodes),
            "op_types": dict(op_types),
            "initializers": listed(
                "initializers",
                (_located(t, f"ModelProto.graph.initializer[{i}]", counted) for i, t in enumerate(initializers)),
                len(initializers),
                max_tensors,
            ),
            "sparse_initializers": listed("sparse_initializers", sparse_items, len(sparse), max_tensors),
            "nodes_were_reordered": graph.nodes_were_reordered,
            "subgraph_count": sum(1 for _ in graph.subgraphs()),
        },
        "functions": listed("functions", functions, len(model.functions), MAX_NAMED_ITEMS),
        "metadata_props": dict(metadata),
        "tensors": listed("tensors", (_row_entry(row) for row in catalog.rows), catalog.count, max_tensors),
        **({"tensors_not_catalogued": catalog.not_catalogued} if catalog.not_catalogued else {}),
        "diagnostics": {
            "errors": sum(1 for d in diagnostics if d.severity == "error"),
            "warnings": sum(1 for d in diagnostics if d.severity == "warning"),
            "items": listed("diagnostics", (d.as_dict() for d in diagnostics), len(diagnostics), max_tensors),
        },
        "counts": counts,
        "truncated": truncated,
    }
