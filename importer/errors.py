"""The one exception type of the importer, and the kinds of refusal.

Owns: `ModelImportError` (public) and `ReadFailure` (internal, raised deep in the
reader and completed with the input name and field path on its way out).
Messages never grow with the input: every name or value quoted is clipped.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

MAX_QUOTED_CHARS: Final = 80
NOT_FOUND: Final = "not-found"  # ModelImportError.reason: the named file does not exist
HARD_LINKED: Final = "hard-linked"  # ModelImportError.reason: a file with several hard links, refused
MAX_MESSAGE_CHARS: Final = 400


class ErrorKind(StrEnum):
    """Why an input was refused (docs/import-rules.md §7)."""

    MALFORMED = "Malformed"  # bytes that are not valid protobuf
    INVALID_MODEL = "InvalidModel"  # valid protobuf that is not a valid model
    UNSUPPORTED = "Unsupported"  # valid, but beyond what the importer handles
    EXTERNAL_DATA = "ExternalData"  # a tensor's external file is missing or unsafe
    IO = "Io"  # the input itself could not be read


def quote(text: str | bytes) -> str:
    """A printable, length-bounded rendering of a name taken from the input."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if len(text) > MAX_QUOTED_CHARS:
        text = text[:MAX_QUOTED_CHARS] + f"...({len(text)} chars)"
    return repr(text)


def _bounded(message: str) -> str:
    if len(message) > MAX_MESSAGE_CHARS:
        return message[:MAX_MESSAGE_CHARS] + "..."
    return message


class ModelImportError(Exception):
    """A model, tensor file or external data file was refused.

    Attributes: `kind`, `message`, `input_name` (the file or stream name),
    `offset` (byte offset from the start of the input, or None when no single
    place is at fault), `field_path` (e.g. `ModelProto.graph.node[3].input[0]`,
    or None) and `reason`: a stable token for callers that act on a cause
    (`NOT_FOUND` when the input file does not exist, `HARD_LINKED` when a
    file with several hard links was refused), else None.
    """

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        input_name: str = "",
        offset: int | None = None,
        field_path: str | None = None,
        reason: str | None = None,
    ) -> None:
        self.kind = kind
        self.reason = reason
        self.message = _bounded(message)
        self.input_name = input_name
        self.offset = offset
        self.field_path = field_path
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = []
        if self.field_path:
            where.append(self.field_path)
        if self.offset is not None:
            where.append(f"byte {self.offset}")
        place = f" at {', '.join(where)}" if where else ""
        name = f" in {quote(self.input_name)}" if self.input_name else ""
        return f"{self.kind.value}{name}{place}: {self.message}"

    def as_dict(self) -> dict[str, object]:
        """The JSON-ready form used by the command line and the service."""
        return {
            "kind": self.kind.value,
            "message": self.message,
            "input": self.input_name,
            "offset": self.offset,
            "field_path": self.field_path,
        }


class ReadFailure(Exception):
    """Internal: a refusal on its way up the reader.

    Each message reader that catches it on the way out prepends the path
    segment of the field it was reading; the public entry point turns it into
    a `ModelImportError` once, with the input's name and the root message name.
    """

    def __init__(self, kind: ErrorKind, message: str, offset: int | None, segment: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = _bounded(message)
        self.offset = offset
        self.segments: list[str] = [] if segment is None else [segment]

    def within(self, segment: str, offset: int | None = None) -> ReadFailure:
        """Record that the failure happened inside field `segment`."""
        self.segments.append(segment)
        if self.offset is None:
            self.offset = offset
        return self

    def field_path(self, root: str) -> str:
        return ".".join([root, *reversed(self.segments)])

    def to_public(self, root: str, input_name: str) -> ModelImportError:
        return ModelImportError(
            self.kind,
            self.message,
            input_name=input_name,
            offset=self.offset,
            field_path=self.field_path(root),
        )


def malformed(message: str, offset: int | None, segment: str | None = None) -> ReadFailure:
    return ReadFailure(ErrorKind.MALFORMED, message, offset, segment)


def invalid(message: str, offset: int | None, segment: str | None = None) -> ReadFailure:
    return ReadFailure(ErrorKind.INVALID_MODEL, message, offset, segment)


def unsupported(message: str, offset: int | None, segment: str | None = None) -> ReadFailure:
    return ReadFailure(ErrorKind.UNSUPPORTED, message, offset, segment)
