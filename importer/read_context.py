"""What every message reader needs: the buffer, its owner and the limits.

Owns `ReadContext` and the nesting check shared by all readers.
"""

from __future__ import annotations

from importer.data_owner import DataOwner
from importer.errors import ReadFailure, malformed
from importer.limits import Limits
from importer.tensor import Tensor
from importer.wire import Buffer


class ReadContext:
    __slots__ = ("buf", "owner", "limits", "max_nesting", "type_cache", "attribute_cache", "external_tensors")

    def __init__(self, buf: Buffer, owner: DataOwner, limits: Limits) -> None:
        self.buf = buf  # the whole input (bytes, bytearray or mmap); tensors view it through `owner`
        self.owner = owner
        self.limits = limits
        self.max_nesting = limits.max_nesting
        # TypeProto bytes and depth -> the parsed type (types repeat across value_info)
        self.type_cache: dict[tuple[bytes, int], object] = {}
        # AttributeProto bytes and depth -> the attribute, for attributes holding no message
        self.attribute_cache: dict[tuple[bytes, int], object] = {}
        # every tensor read whose values are external, for the external data binder
        self.external_tensors: list[Tensor] = []


def check_nesting(ctx: ReadContext, depth: int) -> None:
    """Refuse a message nested deeper than `Limits.max_nesting` levels."""
    if depth > ctx.max_nesting:
        raise too_deep(ctx)


def too_deep(ctx: ReadContext) -> ReadFailure:
    return malformed(f"messages nested deeper than max_nesting={ctx.max_nesting} levels", None)
