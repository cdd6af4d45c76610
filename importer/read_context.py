"""What every message reader needs: the buffer, its owner and the limits.

Owns `ReadContext` and the nesting check shared by all readers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from importer.data_owner import DataOwner
from importer.errors import ReadFailure, malformed
from importer.limits import Limits
from importer.tensor import Tensor
from importer.wire import Buffer


@dataclass(slots=True)
class ReadContext:
    buf: Buffer  # the whole input (bytes, bytearray or mmap); tensors view it through `owner`
    owner: DataOwner
    limits: Limits
    max_nesting: int = 0
    # TypeProto bytes and depth -> the parsed type (types repeat across value_info)
    type_cache: dict[tuple[bytes, int], object] = field(default_factory=dict)
    # AttributeProto bytes and depth -> the attribute, for attributes holding no message
    attribute_cache: dict[tuple[bytes, int], object] = field(default_factory=dict)
    # every tensor read whose values are external, for the external data binder
    external_tensors: list[Tensor] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.max_nesting = self.limits.max_nesting


def check_nesting(ctx: ReadContext, depth: int) -> None:
    """Refuse a message nested deeper than `Limits.max_nesting` levels."""
    if depth > ctx.max_nesting:
        raise too_deep(ctx)


def too_deep(ctx: ReadContext) -> ReadFailure:
    return malformed(f"messages nested deeper than max_nesting={ctx.max_nesting} levels", None)
