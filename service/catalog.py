"""The tensor catalogue of one model: every tensor, with a unique URL-safe name.

Owns `catalog_tensors` (run in the worker): every tensor the importer's
`tensor_places` walk finds (initializers, sparse initializer parts, attribute
tensors in the main graph, every subgraph and every function, in file order,
depth first), each given a name.

Naming scheme (stable: the same model always gives the same names):
- the base is the tensor's name; a sparse tensor's parts are
  `<name>.values` and `<name>.indices`; an unnamed attribute tensor is
  `<node name or op_type>.<attribute name>`;
- every character outside `A-Z a-z 0-9 . _ -` becomes `_`, the base is cut to
  100 characters, and a base that is empty or starts with `.` gets a `_` prefix;
- the first tensor with a base gets the base itself, later ones
  `<base>~2`, `<base>~3`, ... (`~` never occurs in a base, so no suffixed name
  collides with a plain one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from importer import Tensor
from importer.messages import Model
from importer.tensor_places import SPARSE_VALUES, TensorPlace, tensor_places

MAX_BASE_CHARS = 100
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    url_name: str
    tensor: Tensor
    field_path: str  # e.g. ModelProto.graph.node[3].attribute[0].t
    role: str  # initializer, sparse_values, sparse_indices, attribute


def slug(text: str) -> str:
    base = _UNSAFE.sub("_", text)[:MAX_BASE_CHARS]
    if not base or base.startswith("."):
        base = "_" + base
    return base


def catalog_tensors(model: Model) -> list[CatalogEntry]:
    entries: list[CatalogEntry] = []
    taken: dict[str, int] = {}
    for place in tensor_places(model):
        name = slug(_base_name(place))
        count = taken.get(name, 0) + 1
        taken[name] = count
        entries.append(CatalogEntry(name if count == 1 else f"{name}~{count}", place.tensor, place.field_path, place.role))
    return entries


def _base_name(place: TensorPlace) -> str:
    if place.sparse is not None:
        part = "values" if place.role == SPARSE_VALUES else "indices"
        return f"{place.sparse.name or place.holder}.{part}"
    return place.tensor.name or place.holder
