"""Which files of a folder an import sends: exactly those the model names
(the command line's `import --external-data-dir DIR`).

Owns `named_files`: the model's external data locations, read by the
project's own importer (`importer.external_locations`, which parses the
model file alone, binds nothing, and refuses what an import would refuse),
each mapped to its file under the folder. A location whose file is missing
is a `MissingExternalData` naming every missing one; a model the importer
refuses is sent alone, so the service answers with its problem. The
importer is imported only when a folder is given.
"""

from __future__ import annotations

from pathlib import Path


class MissingExternalData(ValueError):
    """The model names external data files the folder does not hold."""

    def __init__(self, folder: Path, missing: list[str]) -> None:
        self.missing = missing
        shown = ", ".join(repr(location) for location in missing[:20]) + (", ..." if len(missing) > 20 else "")
        super().__init__(f"{len(missing)} external data file(s) the model names are not in {str(folder)!r}: {shown}")


def named_files(model: Path, folder: Path) -> dict[str, Path]:
    """{location: file under `folder`} for every external data file `model` names."""
    from importer import ModelImportError, external_locations

    try:
        locations = external_locations(model)
    except ModelImportError:
        return {}
    missing = [location for location in locations if not (folder / location).is_file()]
    if missing:
        raise MissingExternalData(folder, missing)
    return {location: folder / location for location in locations}
