"""TensorProto.DataType: the 28 element types, their widths and numpy forms.

Owns: `DataType`, `bits_per_element`, `numpy_dtype_for` and the typed field
(TensorProto field number) that may carry each type's values.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

import numpy as np


class DataType(IntEnum):
    """Element type codes, numbered and named as in onnx.proto."""

    UNDEFINED = 0
    FLOAT = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    STRING = 8
    BOOL = 9
    FLOAT16 = 10
    DOUBLE = 11
    UINT32 = 12
    UINT64 = 13
    COMPLEX64 = 14
    COMPLEX128 = 15
    BFLOAT16 = 16
    FLOAT8E4M3FN = 17
    FLOAT8E4M3FNUZ = 18
    FLOAT8E5M2 = 19
    FLOAT8E5M2FNUZ = 20
    UINT4 = 21
    INT4 = 22
    FLOAT4E2M1 = 23
    FLOAT8E8M0 = 24
    UINT2 = 25
    INT2 = 26
    FLOAT6E2M3 = 27
    FLOAT6E3M2 = 28


MAX_DATA_TYPE: Final = max(DataType)

# TensorProto typed-field numbers.
FLOAT_DATA: Final = 4
INT32_DATA: Final = 5
STRING_DATA: Final = 6
INT64_DATA: Final = 7
DOUBLE_DATA: Final = 10
UINT64_DATA: Final = 11

_T = DataType
FLOAT8_TYPES: Final = frozenset({_T.FLOAT8E4M3FN, _T.FLOAT8E4M3FNUZ, _T.FLOAT8E5M2, _T.FLOAT8E5M2FNUZ, _T.FLOAT8E8M0})
FOUR_BIT_TYPES: Final = frozenset({_T.UINT4, _T.INT4, _T.FLOAT4E2M1})
TWO_BIT_TYPES: Final = frozenset({_T.UINT2, _T.INT2})
SIX_BIT_TYPES: Final = frozenset({_T.FLOAT6E2M3, _T.FLOAT6E3M2})

BITS_PER_ELEMENT: Final[dict[DataType, int]] = {
    _T.FLOAT: 32, _T.INT32: 32, _T.UINT32: 32,
    _T.UINT8: 8, _T.INT8: 8, _T.BOOL: 8,
    _T.UINT16: 16, _T.INT16: 16, _T.FLOAT16: 16, _T.BFLOAT16: 16,
    _T.INT64: 64, _T.UINT64: 64, _T.DOUBLE: 64, _T.COMPLEX64: 64,
    _T.COMPLEX128: 128,
    **{t: 8 for t in FLOAT8_TYPES},
    **{t: 4 for t in FOUR_BIT_TYPES},
    **{t: 2 for t in TWO_BIT_TYPES},
    **{t: 6 for t in SIX_BIT_TYPES},
}  # fmt: skip

# Which typed field carries the values of each type (docs/import-rules.md §3).
TYPED_FIELD: Final[dict[DataType, int]] = {
    _T.FLOAT: FLOAT_DATA, _T.COMPLEX64: FLOAT_DATA,
    _T.DOUBLE: DOUBLE_DATA, _T.COMPLEX128: DOUBLE_DATA,
    _T.INT64: INT64_DATA,
    _T.UINT64: UINT64_DATA, _T.UINT32: UINT64_DATA,
    _T.STRING: STRING_DATA,
    **{t: INT32_DATA for t in DataType if t not in (
        _T.UNDEFINED, _T.FLOAT, _T.COMPLEX64, _T.DOUBLE, _T.COMPLEX128,
        _T.INT64, _T.UINT64, _T.UINT32, _T.STRING)},
}  # fmt: skip

TYPED_FIELD_NAMES: Final = {
    FLOAT_DATA: "float_data",
    INT32_DATA: "int32_data",
    STRING_DATA: "string_data",
    INT64_DATA: "int64_data",
    DOUBLE_DATA: "double_data",
    UINT64_DATA: "uint64_data",
}

# numpy dtypes for the types numpy has; the others are documented in
# `numpy_dtype_for`.
_NUMPY: Final[dict[DataType, str]] = {
    _T.FLOAT: "<f4", _T.UINT8: "u1", _T.INT8: "i1", _T.UINT16: "<u2", _T.INT16: "<i2",
    _T.INT32: "<i4", _T.INT64: "<i8", _T.BOOL: "?", _T.FLOAT16: "<f2", _T.DOUBLE: "<f8",
    _T.UINT32: "<u4", _T.UINT64: "<u8", _T.COMPLEX64: "<c8", _T.COMPLEX128: "<c16",
}  # fmt: skip


def bits_per_element(data_type: DataType) -> int:
    """Width of one element in the raw layout (STRING has none: 0)."""
    return BITS_PER_ELEMENT.get(data_type, 0)


def typed_entry_count(data_type: DataType, count: int) -> int:
    """Entries a typed field holds for `count` elements (docs/import-rules.md §3):
    two per complex element, one per two 4-bit or four 2-bit elements, else one."""
    if data_type in FOUR_BIT_TYPES:
        return (count + 1) // 2
    if data_type in TWO_BIT_TYPES:
        return (count + 3) // 4
    if data_type in (DataType.COMPLEX64, DataType.COMPLEX128):
        return 2 * count
    return count


def has_native_numpy_dtype(data_type: DataType) -> bool:
    """True for the types numpy represents exactly (float16 included)."""
    return data_type in _NUMPY


def raw_layout_dtype(data_type: DataType) -> np.dtype[np.generic] | None:
    """The numpy dtype whose items are exactly this type's raw layout, one
    element per item (the native types; BFLOAT16 and the float8 types as bit
    patterns), or None: the 4-, 2- and 6-bit types are packed, STRING has no
    raw layout."""
    if data_type in _NUMPY or data_type == DataType.BFLOAT16 or data_type in FLOAT8_TYPES:
        return numpy_dtype_for(data_type)
    return None


def numpy_dtype_for(data_type: DataType) -> np.dtype[np.generic]:
    """The dtype of `Tensor.to_numpy()` for this element type.

    Native types map to their numpy dtype. Types numpy lacks are given as raw
    bit patterns, one element per array item:
    - BFLOAT16: uint16 bit patterns.
    - the float8 types: uint8 bit patterns.
    - the 4-bit, 2-bit and 6-bit types: unpacked, one element per uint8 in its
      low bits (INT4 and INT2 sign-extended into int8).
    """
    if data_type in _NUMPY:
        return np.dtype(_NUMPY[data_type])
    if data_type == DataType.BFLOAT16:
        return np.dtype("<u2")
    if data_type in (DataType.INT4, DataType.INT2):
        return np.dtype("i1")
    if data_type in FLOAT8_TYPES or data_type in FOUR_BIT_TYPES or data_type in TWO_BIT_TYPES or data_type in SIX_BIT_TYPES:
        return np.dtype("u1")
    raise ValueError(f"no numpy dtype for {data_type.name}")
