"""External data (docs/import-rules.md §5): binding tensors to bytes in other files.

Owns the rules for `external_data` entries: `location` relative and confined
to the external-data directory (checked lexically, then again after resolving
every link), `offset`/`length` non-negative decimal integers, `length` equal
to the expected length, and the range within the file. One mapping per file,
shared by its tensors; at most `Limits.max_external_files` distinct files.
"""

from __future__ import annotations

import posixpath
import re

from importer.data_owner import DataOwner
from importer.element_types import DataType
from importer.errors import ErrorKind, ModelImportError, ReadFailure, quote
from importer.limits import Limits
from importer.messages import Model
from importer.source import ConfinedOpener, confined_descriptor, open_confined
from importer.tensor import Tensor
from importer.tensor_places import tensor_places

_DECIMAL = re.compile(r"[0-9]+")
_DRIVE = re.compile(r"^[A-Za-z]:")
MAX_EXTERNAL_FILE_BYTES = 1 << 62  # mapped, not read: any size the platform maps


def _refuse(message: str, tensor: Tensor) -> ReadFailure:
    return ReadFailure(ErrorKind.EXTERNAL_DATA, message, tensor.offset)


def location_refusal(location: str) -> str | None:
    """Why a relative location breaks the lexical rules of docs/import-rules.md §5, rule 1
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
    """The lexical rules of docs/import-rules.md §5, rule 1, for an external data location."""
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

    def __init__(self, directory: str | None, limits: Limits, opener: ConfinedOpener = confined_descriptor) -> None:
        self.directory = directory
        self.limits = limits
        self.opener = opener
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
                    self.directory,
                    location,
                    allow_hard_links=self.limits.allow_hard_links,
                    max_bytes=MAX_EXTERNAL_FILE_BYTES,
                    opener=self.opener,
                )
            except ModelImportError as error:
                raise _refuse(f"external data file {quote(location)} {error.message}", tensor) from None
            self.owners[key] = owner
        return owner


def path_of_tensor(model: Model, wanted: Tensor) -> str:
    """The field path of an external tensor, below ModelProto (walks the
    model: for errors only)."""
    for place in tensor_places(model, root=""):
        if place.tensor is wanted:
            return place.field_path.removeprefix(".")
    return "graph"  # a tensor in a field the attribute's type does not use
