"""The registries' shared secrets: `secret_text` (a setting's variable, else its file) and `bearer_of` (a header's token).

The MLflow webhook's secret, the OCI notifications' token and the token Harbor is
registered with are each given as a variable or as a file (a mounted Secret); the
two tokens arrive as `Authorization: Bearer TOKEN`, compared by the caller in
constant time.
"""

from __future__ import annotations

from pathlib import Path


def secret_text(value: str, file: Path | None) -> str:
    """`value`, else the text of `file` (one trailing newline dropped); "" with neither."""
    if value:
        return value
    return file.read_text().removesuffix("\n") if file is not None else ""


def bearer_of(authorization: str | None) -> bytes | None:
    """The token of an `Authorization: Bearer TOKEN` header (spaces around it dropped); None for none or another scheme."""
    scheme, _, given = (authorization or "").partition(" ")
    return given.strip().encode() if scheme.lower() == "bearer" and given else None
