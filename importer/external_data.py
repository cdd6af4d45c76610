"""External data (seed section 5): binding tensors to bytes in other files.

Owns the rules for `external_data` entries: `location` relative and confined
to the external-data directory (checked lexically, then again after resolving
every link), `offset`/`length` non-negative decimal integers, `length` equal
to the expected length, and the range within the file. One mapping per file,
shared by its tensors; at most `Limits.max_external_files` distinct files.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator

from importer.data_owner import DataOwner
from importer.element_types import DataType
from importer.errors import ErrorKind, ModelImportError, ReadFailure, quote
from importer.limits import Limits
from importer.messages import AttributeType, Graph, Model
from importer.source import open_confined
from importer.tensor import FROM_EXTERNAL, SparseTensor, Tensor

_DECIMAL = re.compile(r"[0-9]+")
_DRIVE = re.compile(r"^[A-Za-z]:")
MAX_EXTERNAL_FILE_BYTES = 1 << 62  # mapped, not read: any size the platform maps


def _refuse(message: str, tensor: Tensor) -> ReadFailure:
    return ReadFailure(ErrorKind.EXTERNAL_DATA, message, tensor.offset)


def location_refusal(location: str) -> str | None:
    """Why a relative location breaks the lexical rules of section 5, step 1
    (empty, NUL, rooted at / or \\, a drive prefix, a '..' segment split at
    either slash), or None. Also used by the service for its own paths."""
    if not location:
        return "is empty"
    if "\0" in location:
        return "contains NUL"
    if location[0] in "/\\" or _DRIVE.match(location):
        return "is not relative"
    if ".." in re.split(r"[/\\]", location):
        return "has a '..' segment"
    return None


def check_location(location: str, tensor: Tensor) -> str:
    """The lexical rules of section 5, step 1, for an external data location."""
    reason = location_refusal(location)
    if reason is not None:
        raise _refuse(f"external data location {quote(location)} {reason}", tensor)
    return location


def _non_negative(entries: dict[str, str], key: str, tensor: Tensor) -> int | None:
    text = entries.get(key)
    if text is None:
        return None
    if not _DECIMAL.fullmatch(text):
        raise _refuse(f"external data {key} {quote(text)} is not a non-negative decimal integer", tensor)
    return int(text)


class ExternalDataBinder:
    """Binds every external tensor of one model to its file's mapping."""

    def __init__(self, directory: str | None, limits: Limits) -> None:
        self.directory = directory
        self.limits = limits
        self.owners: dict[str, DataOwner] = {}

    def bind(self, tensor: Tensor) -> None:
        entries = tensor.external_data or {}
        location = check_location(entries.get("location", ""), tensor)
        offset = _non_negative(entries, "offset", tensor) or 0
        length = _non_negative(entries, "length", tensor)
        if tensor.data_type == DataType.STRING:
            raise _refuse("STRING tensors cannot use external data", tensor)
        if length is not None and length != tensor.byte_length:
            raise _refuse(f"external data length {length} differs from the expected {tensor.byte_length}", tensor)
        owner = self._owner_for(location, tensor)
        if offset + tensor.byte_length > owner.size:
            raise _refuse(
                f"external data range {offset}+{tensor.byte_length} exceeds the {owner.size} bytes of {quote(location)}",
                tensor,
            )
        tensor.bind_view(owner, offset)

    def _owner_for(self, location: str, tensor: Tensor) -> DataOwner:
        if self.directory is None:
            raise _refuse("external data needs a directory, and none was given for this input", tensor)
        key = posixpath.normpath(location)  # "a.bin" and "./a.bin" share one mapping
        owner = self.owners.get(key)
        if owner is None:
            if len(self.owners) >= self.limits.max_external_files:
                raise _refuse(f"more than max_external_files={self.limits.max_external_files} external files", tensor)
            try:
                owner = open_confined(
                    self.directory, location, allow_hard_links=self.limits.allow_hard_links, max_bytes=MAX_EXTERNAL_FILE_BYTES
                )
            except ModelImportError as error:
                raise _refuse(f"external data file {quote(location)} {error.message}", tensor) from None
            self.owners[key] = owner
        return owner


def path_of_tensor(model: Model, wanted: Tensor) -> str:
    """The field path of an external tensor (walks the model: for errors only)."""
    if model.graph is not None:
        for path, tensor in _graph_tensors(model.graph, "graph"):
            if tensor is wanted:
                return path
    return "graph"  # a tensor in a field the attribute's type does not use


def _graph_tensors(graph: Graph, path: str) -> Iterator[tuple[str, Tensor]]:
    for index, tensor in enumerate(graph.initializer):
        if tensor.source == FROM_EXTERNAL:
            yield f"{path}.initializer[{index}]", tensor
    for index, sparse in enumerate(graph.sparse_initializer):
        yield from _sparse_tensors(sparse, f"{path}.sparse_initializer[{index}]")
    for node_index, node in enumerate(graph.node):
        for attr_index, attribute in enumerate(node.attribute):
            attr_path = f"{path}.node[{node_index}].attribute[{attr_index}]"
            yield from _attribute_tensors(attribute.type, attribute.value, attr_path)


def _sparse_tensors(sparse: SparseTensor, path: str) -> Iterator[tuple[str, Tensor]]:
    for part, tensor in (("values", sparse.values), ("indices", sparse.indices)):
        if tensor.source == FROM_EXTERNAL:
            yield f"{path}.{part}", tensor


def _attribute_tensors(attr_type: AttributeType, value: object, path: str) -> Iterator[tuple[str, Tensor]]:
    items = value if isinstance(value, list) else [value]
    field = {AttributeType.TENSOR: "t", AttributeType.GRAPH: "g", AttributeType.SPARSE_TENSOR: "sparse_tensor"}.get(attr_type)
    plural = {
        AttributeType.TENSORS: "tensors",
        AttributeType.GRAPHS: "graphs",
        AttributeType.SPARSE_TENSORS: "sparse_tensors",
    }.get(attr_type)
    for index, item in enumerate(items):
        item_path = f"{path}.{field}" if field else f"{path}.{plural}[{index}]"
        if isinstance(item, Tensor) and item.source == FROM_EXTERNAL:
            yield item_path, item
        elif isinstance(item, SparseTensor):
            yield from _sparse_tensors(item, item_path)
        elif isinstance(item, Graph):
            yield from _graph_tensors(item, item_path)
