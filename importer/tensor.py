"""Tensors as imported: element type, dims, and their values as views.

Owns `Tensor` and `SparseTensor`. A tensor's values are bytes in the raw
layout of TensorProto.raw_data (little-endian, sub-byte types packed), held as
a view into a `DataOwner` (the model file, the caller's bytes, or an external
file) or, for values converted from a typed field, a small bytes object.
Nothing here copies tensor bytes except `to_numpy`, `tobytes` and `sha256`.
"""

from __future__ import annotations

import hashlib
from typing import Final

import numpy as np
import numpy.typing as npt

from importer.data_owner import DataOwner
from importer.element_types import (
    FOUR_BIT_TYPES,
    SIX_BIT_TYPES,
    TWO_BIT_TYPES,
    DataType,
    numpy_dtype_for,
)
from importer.errors import ErrorKind, ModelImportError, quote

# Where a tensor's values come from.
FROM_RAW_DATA: Final = "raw_data"
FROM_EXTERNAL: Final = "external"
FROM_NOTHING: Final = "none"  # a tensor with no elements
# otherwise: the name of the typed field, e.g. "float_data"


class Tensor:
    """A TensorProto: its element type, dims and values in the raw layout."""

    __slots__ = (
        "name",
        "data_type",
        "dims",
        "element_count",
        "byte_length",
        "source",
        "external_data",
        "doc_string",
        "offset",
        "_owner",
        "_start",
        "_converted",
        "_strings",
    )

    def __init__(
        self,
        *,
        name: str,
        data_type: DataType,
        dims: tuple[int, ...],
        element_count: int,
        byte_length: int,
        source: str,
        doc_string: str = "",
        offset: int = 0,
        external_data: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.data_type = data_type
        self.dims = dims
        self.element_count = element_count
        self.byte_length = byte_length
        self.source = source
        self.external_data = external_data
        self.doc_string = doc_string
        self.offset = offset
        self._owner: DataOwner | None = None
        self._start = 0
        self._converted: bytes | bytearray | None = None
        self._strings: list[bytes] | None = None

    # --- binding the values (done by the readers and the external data loader)

    def bind_view(self, owner: DataOwner, start: int) -> None:
        """Values are owner's bytes [start, start + byte_length)."""
        self._owner = owner
        self._start = start

    def bind_converted(self, data: bytes | bytearray) -> None:
        self._converted = data

    def bind_strings(self, strings: list[bytes]) -> None:
        self._strings = strings

    # --- where the values are

    @property
    def data_file(self) -> str | None:
        """Name of the file the values are a view into (None: converted or none)."""
        return self._owner.name if self._owner is not None else None

    @property
    def data_offset(self) -> int | None:
        """Byte offset of the values within `data_file`."""
        return self._start if self._owner is not None else None

    # --- reading the values

    @property
    def is_bound(self) -> bool:
        return self._owner is not None or self._converted is not None or self._strings is not None

    @property
    def data(self) -> memoryview:
        """The values in the raw layout, as a zero-copy read-only view.

        STRING tensors have no raw layout: use `strings`.
        """
        if self._converted is not None:
            return memoryview(self._converted).toreadonly()
        if self._owner is not None:
            return self._owner.view(self._start, self._start + self.byte_length)
        if self.data_type == DataType.STRING:
            raise TypeError("STRING tensors have no raw layout; use .strings")
        return memoryview(b"")

    @property
    def strings(self) -> list[bytes]:
        """The elements of a STRING tensor."""
        if self.data_type != DataType.STRING:
            raise TypeError(f"{self.data_type.name} tensor has no strings")
        return list(self._strings or [])

    def tobytes(self) -> bytes:
        return bytes(self.data)

    def string_layout(self) -> bytes:
        """A STRING tensor's bytes, element by element: its byte length as 8
        bytes little-endian, then its bytes (STRING has no raw layout)."""
        return b"".join(len(item).to_bytes(8, "little") + item for item in self.strings)

    def sha256(self) -> str:
        """SHA-256 of the raw layout (for STRING: of `string_layout`)."""
        if self.data_type == DataType.STRING:
            return hashlib.sha256(self.string_layout()).hexdigest()
        return hashlib.sha256(self.data).hexdigest()

    def to_numpy(self) -> npt.NDArray[np.generic]:
        """A copy of the values as a numpy array of shape `dims`.

        See `importer.element_types.numpy_dtype_for` for the types numpy lacks
        (bfloat16 and float8 as bit patterns; 4-, 2- and 6-bit types unpacked,
        one element per byte). STRING tensors give an object array of bytes.
        A shape numpy cannot represent (an empty tensor whose other dims
        multiply past 2^63) raises ModelImportError (Unsupported).
        """
        try:
            return self._to_numpy()
        except ValueError as error:
            raise ModelImportError(
                ErrorKind.UNSUPPORTED,
                f"numpy cannot hold tensor {quote(self.name)} of dims {list(self.dims)[:8]}: {str(error)[:100]}",
                input_name=self.data_file or "",
            ) from None

    def _to_numpy(self) -> npt.NDArray[np.generic]:
        if self.data_type == DataType.STRING:
            return np.array(self.strings, dtype=object).reshape(self.dims)
        dtype = numpy_dtype_for(self.data_type)
        packed = np.frombuffer(self.data, dtype=np.uint8)
        if self.data_type in FOUR_BIT_TYPES:
            values = _unpack_bits(packed, 4, self.element_count)
        elif self.data_type in TWO_BIT_TYPES:
            values = _unpack_bits(packed, 2, self.element_count)
        elif self.data_type in SIX_BIT_TYPES:
            values = _unpack_bits(packed, 6, self.element_count)
        else:
            return np.frombuffer(self.data, dtype=dtype).copy().reshape(self.dims)
        if dtype == np.int8:
            bits = 4 if self.data_type == DataType.INT4 else 2
            signed = values.astype(np.int8)
            signed[values >= (1 << (bits - 1))] -= 1 << bits
            return signed.reshape(self.dims)
        return values.reshape(self.dims)

    def __repr__(self) -> str:
        return f"Tensor(name={self.name!r}, data_type={self.data_type.name}, dims={self.dims}, source={self.source})"


def _unpack_bits(packed: npt.NDArray[np.uint8], bits: int, count: int) -> npt.NDArray[np.uint8]:
    """Unpack a little-endian bit stream of `bits`-wide elements, one per byte."""
    stream = np.unpackbits(packed, bitorder="little")[: count * bits]
    weights = (1 << np.arange(bits, dtype=np.uint8)).astype(np.uint8)
    unpacked: npt.NDArray[np.uint8] = (stream.reshape(count, bits) * weights).sum(axis=1, dtype=np.uint8)
    return unpacked


class SparseTensor:
    """A SparseTensorProto as written: values, indices and the dense dims."""

    __slots__ = ("values", "indices", "dims", "offset")

    def __init__(self, values: Tensor, indices: Tensor, dims: tuple[int, ...], offset: int = 0) -> None:
        self.values = values
        self.indices = indices
        self.dims = dims
        self.offset = offset

    @property
    def name(self) -> str:
        return self.values.name

    def __repr__(self) -> str:
        return f"SparseTensor(name={self.name!r}, dims={self.dims})"
