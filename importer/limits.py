"""Every size and count limit of the importer, with safe defaults.

Owns: `Limits`, and `parse_size`, the notation a size is given in on a
command line (`4GiB`, `1.5G`, plain bytes). Each limit is named in the error
it causes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

MAX_PROTOBUF_BYTES: Final = 2**31 - 1  # protobuf's own limit for one message (docs/import-rules.md §1)
MAX_ELEMENT_COUNT: Final = 2**60  # docs/import-rules.md §3
MAX_TENSOR_BYTES: Final = 2**31 - 1  # docs/import-rules.md §3: the specification's limit, and the default
MAX_TENSOR_BYTES_CEILING: Final = 2**60  # the most `max_tensor_bytes` may be: the element-count bound, in bytes
NESTING_RANGE: Final = (8, 250)
_SIZE_UNITS: Final = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": 1 << 10,
    "m": 1000**2, "mb": 1000**2, "mib": 1 << 20,
    "g": 1000**3, "gb": 1000**3, "gib": 1 << 30,
    "t": 1000**4, "tb": 1000**4, "tib": 1 << 40,
}  # fmt: skip
_SIZE: Final = re.compile(r"\s*([0-9]+)(?:\.([0-9]+))?\s*([A-Za-z]*)\s*")


def parse_size(text: str) -> int:
    """`4GiB` -> 4294967296; `1.5M` -> 1500000; `4096` -> 4096 (a fraction of a byte is dropped).
    Raises ValueError for anything else."""
    match = _SIZE.fullmatch(text)
    unit = match.group(3).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS:
        raise ValueError(f"{text!r} is not a size (a number with an optional unit such as KiB, MiB, GiB)")
    whole, fraction = match.group(1), match.group(2) or ""
    scale = int(10 ** len(fraction))
    return int(whole + fraction) * _SIZE_UNITS[unit] // scale  # exact: no float rounding of large sizes


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds applied while reading one model.

    max_nesting: nested message levels (ModelProto is level 0; a graph inside
        a node's attribute inside a graph costs three levels).
    max_external_files: distinct external data files one model may name.
    allow_hard_links: accept a model file (opened by path) or external data
        files with more than one hard link.
    max_tensor_bytes: the largest tensor whose values are in external data,
        in bytes, decided from its dims and element type before any value is
        read: from the specification's 2^31 - 1 (the default) up to 2^60. A
        tensor held in the model file keeps the specification's limit
        whatever this is (docs/import-rules.md §3).
    """

    max_nesting: int = 128
    max_external_files: int = 1000
    allow_hard_links: bool = False
    max_tensor_bytes: int = MAX_TENSOR_BYTES

    def __post_init__(self) -> None:
        low, high = NESTING_RANGE
        if not low <= self.max_nesting <= high:
            raise ValueError(f"max_nesting must be within {low} to {high}, not {self.max_nesting}")
        if self.max_external_files < 1:
            raise ValueError("max_external_files must be at least 1")
        if not MAX_TENSOR_BYTES <= self.max_tensor_bytes <= MAX_TENSOR_BYTES_CEILING:
            raise ValueError(f"max_tensor_bytes must be within 2^31-1 to 2^60, not {self.max_tensor_bytes}")
