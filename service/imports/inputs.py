"""What an import starts from, once the HTTP layer has parsed the request.

Owns `Upload` (a model and its external data parts, already on disk in the
request's work folder, each with its size and SHA-256) and `StagedFile`.
A data-root import starts from the client's path alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_DISPLAY_NAME = "model.onnx"


@dataclass
class StagedFile:
    location: str  # relative location (the model: its display name)
    path: Path
    size: int = 0
    sha256: str = ""


@dataclass
class Upload:
    model_path: Path  # where the model part is written
    external_dir: Path  # where external_data parts are written, under their locations
    display_name: str = DEFAULT_DISPLAY_NAME
    model: StagedFile | None = None
    externals: list[StagedFile] = field(default_factory=list)

    @property
    def size(self) -> int:
        """Bytes received in all: the model and every external part."""
        return sum(staged.size for staged in [self.model, *self.externals] if staged is not None)
