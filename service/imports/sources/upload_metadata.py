"""A resumable upload's `Upload-Metadata` (tus 1.0.0): its pairs, parsed once.

Owns `metadata_pairs` (comma-separated `key base64value` pairs, at most
`MAX_METADATA_CHARS`: keys printable ASCII without commas, each once; values
strict base64, or absent) and `naming_of_metadata` (the `name` and `label`
an upload's metadata gives the model it holds, UTF-8, under the rules of
`service.imports.naming`) and `holds_model` (its `part`, as a multipart
form's: `model` or `external_data`; a model upload is checked at the PATCH
that finishes it, `service.imports.model_upload_check`). A header that
breaks a rule is `BadInput` saying which. The creation route checks a header with them (`service.api.tus`, a
400 before anything is stored); an import of finished uploads reads its
model upload's stored header again
(`service.imports.sources.finished_uploads`).
"""

from __future__ import annotations

import base64
import binascii
from typing import Final

from service.errors import BadInput
from service.imports.naming import MAX_FIELD_BYTES, Naming, named

MAX_METADATA_CHARS: Final = 4096
NAMING_KEYS: Final = ("name", "label")
PART_KEY: Final = "part"
PARTS: Final = (b"model", b"external_data")


def metadata_pairs(value: str | None) -> dict[str, bytes]:
    """Each key of the header and its decoded value (b"" for a key without one); {} for none."""
    if value is None or not value.strip():
        return {}
    if len(value) > MAX_METADATA_CHARS:
        raise BadInput(f"Upload-Metadata is longer than {MAX_METADATA_CHARS} characters")
    if not value.isascii():
        raise BadInput("Upload-Metadata must be ASCII: keys, then base64 values")
    pairs: dict[str, bytes] = {}
    for pair in value.split(","):
        key, _, encoded = pair.strip(" ").partition(" ")
        if not key or not all("!" <= c <= "~" for c in key):
            raise BadInput(f"Upload-Metadata: {pair.strip()[:60]!r} is not a key (printable ASCII) and a base64 value")
        if key in pairs:
            raise BadInput(f"Upload-Metadata names {key[:60]!r} twice")
        try:
            pairs[key] = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise BadInput(f"Upload-Metadata: the value of {key[:60]!r} is not base64") from None
    return pairs


def naming_of_metadata(pairs: dict[str, bytes]) -> Naming:
    """The `name` and `label` of an upload's metadata (None where absent), each checked (`named`)."""
    given: dict[str, str] = {}
    for key in NAMING_KEYS:
        if key not in pairs:
            continue
        if len(pairs[key]) > MAX_FIELD_BYTES:
            raise BadInput(f"Upload-Metadata: the {key} has more than {MAX_FIELD_BYTES} bytes")
        try:
            given[key] = named(key, pairs[key].decode("utf-8"))
        except UnicodeDecodeError:
            raise BadInput(f"Upload-Metadata: the {key} is not UTF-8") from None
    return Naming(given.get("name"), given.get("label"))


def holds_model(pairs: dict[str, bytes]) -> bool:
    """Whether the upload's `part` says it holds an import's model (`model`); `external_data`, or no `part`:
    not. BadInput for any other value."""
    part = pairs.get(PART_KEY)
    if part is not None and part not in PARTS:
        raise BadInput(f"Upload-Metadata: the part is {part[:40]!r}, not 'model' or 'external_data'")
    return part == b"model"
