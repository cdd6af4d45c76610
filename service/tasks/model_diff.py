"""What changed from one model to another, from their graph documents.

Owns `compare_models`: given each model's graph document
(`service.tasks.graph_document`, its tensor references carrying their
SHA-256) and its opsets, the differences a reviewer asks for first:
opsets and node domains, the graph's inputs and outputs (names and types),
op-type counts, and one list of changes, nodes then initializers, each
added, removed or changed.

Nodes are matched by name where a name is given and unique in both graphs,
then by position: the k-th unmatched node of an op type in one graph with
the k-th of the same op type in the other, first among the nodes without a
unique name, then among all that are left (a renamed node). A matched node
is changed when its name, op type, domain, inputs, outputs or attributes
differ (`fields` names which; a raised opset is told once, in `opsets`, not
on every node); a changed node carries the name it has in b (and `a_name`
when it was renamed). Initializers are matched by name and changed when
their element type, dims or bytes (SHA-256) differ (a graph document
rendered before references carried a SHA-256 has none:
`tensor_bytes_compared` is then false). Tensor references inside attributes
are compared by name, type, dims and SHA-256, never by their href (which
names the model); a TENSORS or SPARSE_TENSORS attribute of many items lists
only its first ones, and is compared by those and by the count and digest of
the rest (`omitted`, `omitted_sha256`; an attribute of a document from before
that cut is cut the same way first: `service.tasks.graph_document.fold_listed`). The main
graph's nodes are compared; a subgraph is part of its node's attributes.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from importer.summary import op_type_key
from service.tasks.graph_document import fold_listed

Json = Any
MAX_LISTED = 1000  # inputs, outputs, op types, opsets: each list cut here (`truncated` names it)
NODE_FIELDS = ("op_type", "domain", "inputs", "outputs", "attributes")  # an opset raised is told once, in `opsets`


@dataclass(frozen=True)
class ModelSide:
    """One model as the comparison reads it."""

    model_id: str
    graph: Json  # the graph document: {"format", "graph", "functions"}
    opsets: list[Json]  # [{"domain", "version"}]


@dataclass(frozen=True)
class ModelDiff:
    """The whole comparison: `head` (everything but the changes) and every change, in order."""

    head: Json
    changes: list[Json]


def _op_key(node: Json) -> str:
    return op_type_key(node.get("domain") or "", node["op_type"])


def _comparable(value: Json) -> Json:
    """An attribute value without what names the model it came from (hrefs);
    a plural tensor attribute of a document that listed every item, cut as
    documents are now (`fold_listed`), so that both sides compare alike."""
    if isinstance(value, dict):
        return {key: _comparable(item) for key, item in fold_listed(value).items() if key != "href"}
    if isinstance(value, list):
        return [_comparable(item) for item in value]
    return value


def _node_view(node: Json) -> Json:
    return {
        "op_type": node["op_type"],
        "domain": node.get("domain") or "",
        "inputs": node.get("inputs", []),
        "outputs": node.get("outputs", []),
        "attributes": _comparable(node.get("attributes", [])),
    }


def _by_position(nodes_a: list[Json], rest_a: list[int], nodes_b: list[Json], rest_b: list[int]) -> list[tuple[int, int]]:
    """The k-th of `rest_a` of each op type paired with the k-th of `rest_b` of that op type."""
    waiting: defaultdict[str, list[int]] = defaultdict(list)
    for position in rest_b:
        waiting[_op_key(nodes_b[position])].append(position)
    taken: Counter[str] = Counter()
    pairs = []
    for position in rest_a:
        key = _op_key(nodes_a[position])
        if taken[key] < len(waiting[key]):
            pairs.append((position, waiting[key][taken[key]]))
            taken[key] += 1
    return pairs


def _match_nodes(nodes_a: list[Json], nodes_b: list[Json]) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """Pairs of positions (a, b), and the positions left in a and in b: by a
    name unique in both graphs, then by position among the nodes without a
    unique name, then by position among all that are left (a renamed node)."""
    names_a = Counter(node.get("name") or "" for node in nodes_a)
    names_b = Counter(node.get("name") or "" for node in nodes_b)
    unique_a = {name for name, count in names_a.items() if name and count == 1}
    unique_b = {name for name, count in names_b.items() if name and count == 1}
    both = unique_a & unique_b
    by_name_b = {node["name"]: position for position, node in enumerate(nodes_b) if node.get("name") in both}
    pairs = [(position, by_name_b[node["name"]]) for position, node in enumerate(nodes_a) if node.get("name") in both]
    for named_a, named_b in ((False, False), (True, True)):  # the anonymous first, then whatever is left
        used_a, used_b = {a for a, _ in pairs}, {b for _, b in pairs}
        rest_a = [p for p, node in enumerate(nodes_a) if p not in used_a and (named_a or (node.get("name") or "") not in unique_a)]
        rest_b = [p for p, node in enumerate(nodes_b) if p not in used_b and (named_b or (node.get("name") or "") not in unique_b)]
        pairs += _by_position(nodes_a, rest_a, nodes_b, rest_b)
    used_a, used_b = {a for a, _ in pairs}, {b for _, b in pairs}
    left_a = [position for position in range(len(nodes_a)) if position not in used_a]
    left_b = [position for position in range(len(nodes_b)) if position not in used_b]
    return sorted(pairs), left_a, left_b


def _node_changes(nodes_a: list[Json], nodes_b: list[Json]) -> Iterator[Json]:
    pairs, left_a, left_b = _match_nodes(nodes_a, nodes_b)
    for a, b in pairs:
        view_a, view_b = _node_view(nodes_a[a]), _node_view(nodes_b[b])
        fields = [field for field in NODE_FIELDS if view_a[field] != view_b[field]]
        if (nodes_a[a].get("name") or "") != (nodes_b[b].get("name") or ""):
            fields.insert(0, "name")
        if fields:
            change = {
                "kind": "node", "change": "changed", "name": nodes_b[b].get("name") or "", "op_type": _op_key(nodes_b[b]),
                "a_position": a, "b_position": b, "fields": fields,
            }  # fmt: skip
            if "name" in fields:
                change["a_name"] = nodes_a[a].get("name") or ""
            yield change
    for a in left_a:
        yield {"kind": "node", "change": "removed", "name": nodes_a[a].get("name") or "", "op_type": _op_key(nodes_a[a]), "a_position": a}
    for b in left_b:
        yield {"kind": "node", "change": "added", "name": nodes_b[b].get("name") or "", "op_type": _op_key(nodes_b[b]), "b_position": b}


def _initializers(graph: Json) -> dict[str, Json]:
    found = {}
    for value in graph.get("values", []):
        reference = value.get("initializer")
        if reference is not None:
            found[value["name"]] = {key: reference.get(key) for key in ("elem_type", "dims", "sha256")}
    return found


def _initializer_changes(a: dict[str, Json], b: dict[str, Json]) -> Iterator[Json]:
    """Initializers (`_initializers` of each graph) added, removed or changed."""
    for name, tensor in b.items():
        if name not in a:
            yield {"kind": "initializer", "change": "added", "name": name, "b": tensor}
            continue
        fields = [field for field in ("elem_type", "dims", "sha256") if a[name][field] != tensor[field]]
        if fields == ["sha256"] and None in (a[name]["sha256"], tensor["sha256"]):
            fields = []  # a graph document rendered before tensors carried their SHA-256: bytes not compared
        if fields:
            yield {"kind": "initializer", "change": "changed", "name": name, "fields": fields, "a": a[name], "b": tensor}
    for name, tensor in a.items():
        if name not in b:
            yield {"kind": "initializer", "change": "removed", "name": name, "a": tensor}


def _types(graph: Json) -> dict[str, Json]:
    """Each value's declared type, by name."""
    return {value["name"]: value.get("type") for value in graph.get("values", [])}


def _typed(types: dict[str, Json], names: Iterable[str]) -> dict[str, Json]:
    return {name: types.get(name) for name in names}


def _by_name(a: dict[str, Json], b: dict[str, Json]) -> list[Json]:
    """Entries present in one only, or with another value: {"name", "change", "a", "b"}."""
    found = [{"name": name, "change": "removed", "a": value, "b": None} for name, value in a.items() if name not in b]
    for name, value in b.items():
        if name not in a:
            found.append({"name": name, "change": "added", "a": None, "b": value})
        elif a[name] != value:
            found.append({"name": name, "change": "changed", "a": a[name], "b": value})
    return found


def compare_models(a: ModelSide, b: ModelSide) -> ModelDiff:
    """The comparison of `a` (before) with `b` (after)."""
    graph_a, graph_b = a.graph["graph"], b.graph["graph"]
    nodes_a, nodes_b = graph_a.get("nodes", []), graph_b.get("nodes", [])
    truncated: list[str] = []

    def listed(name: str, items: list[Json]) -> list[Json]:
        if len(items) > MAX_LISTED:
            truncated.append(name)
        return items[:MAX_LISTED]

    opsets = _by_name({o["domain"]: o["version"] for o in a.opsets}, {o["domain"]: o["version"] for o in b.opsets})
    counts_a, counts_b = Counter(map(_op_key, nodes_a)), Counter(map(_op_key, nodes_b))
    op_types = [
        {"op_type": key, "a": counts_a[key], "b": counts_b[key]} for key in sorted(counts_a | counts_b) if counts_a[key] != counts_b[key]
    ]
    domains_a = {node.get("domain") or "" for node in nodes_a}
    domains_b = {node.get("domain") or "" for node in nodes_b}
    tensors_a, tensors_b = _initializers(graph_a), _initializers(graph_b)
    types_a, types_b = _types(graph_a), _types(graph_b)
    changes = [*_node_changes(nodes_a, nodes_b), *_initializer_changes(tensors_a, tensors_b)]
    tally: dict[str, Counter[str]] = {"node": Counter(), "initializer": Counter()}
    for change in changes:
        tally[change["kind"]][change["change"]] += 1
    head = {
        "format": "onnx-service-diff/1",
        "a": {"id": a.model_id, "node_count": len(nodes_a), "initializer_count": len(tensors_a)},
        "b": {"id": b.model_id, "node_count": len(nodes_b), "initializer_count": len(tensors_b)},
        "opsets": listed("opsets", [{"domain": o["name"], "change": o["change"], "a": o["a"], "b": o["b"]} for o in opsets]),
        "domains": {"added": sorted(domains_b - domains_a), "removed": sorted(domains_a - domains_b)},
        "inputs": listed("inputs", _by_name(_typed(types_a, graph_a.get("inputs", [])), _typed(types_b, graph_b.get("inputs", [])))),
        "outputs": listed("outputs", _by_name(_typed(types_a, graph_a.get("outputs", [])), _typed(types_b, graph_b.get("outputs", [])))),
        "op_types": listed("op_types", op_types),
        "counts": {
            kind: {"added": tally[kind]["added"], "removed": tally[kind]["removed"], "changed": tally[kind]["changed"]}
            for kind in ("node", "initializer")
        },
        "tensor_bytes_compared": all(t["sha256"] is not None for side in (tensors_a, tensors_b) for t in side.values()),
        "truncated": truncated,
    }
    head["identical"] = not (changes or head["opsets"] or head["inputs"] or head["outputs"])
    return ModelDiff(head, changes)
