"""Every size and count limit of the importer, with safe defaults.

Owns: `Limits`. Each limit is named in the error it causes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

MAX_PROTOBUF_BYTES: Final = 2**31 - 1  # protobuf's own limit for one message (docs/import-rules.md §1)
MAX_ELEMENT_COUNT: Final = 2**60  # docs/import-rules.md §3
MAX_TENSOR_BYTES: Final = 2**31 - 1  # docs/import-rules.md §3
NESTING_RANGE: Final = (8, 250)


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds applied while reading one model.

    max_nesting: nested message levels (ModelProto is level 0; a graph inside
        a node's attribute inside a graph costs three levels).
    max_external_files: distinct external data files one model may name.
    allow_hard_links: accept a model file (opened by path) or external data
        files with more than one hard link.
    """

    max_nesting: int = 128
    max_external_files: int = 1000
    allow_hard_links: bool = False

    def __post_init__(self) -> None:
        low, high = NESTING_RANGE
        if not low <= self.max_nesting <= high:
            raise ValueError(f"max_nesting must be within {low} to {high}, not {self.max_nesting}")
        if self.max_external_files < 1:
            raise ValueError("max_external_files must be at least 1")
