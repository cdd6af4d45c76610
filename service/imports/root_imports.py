"""How a model under the data root is imported: `import_from_root` (a client's `{"path": ...}`).

A folder on this machine is read in place: its worker maps the very file
(`service.imports.flow.import_path`). Any other root
(`service.store.data_root.DataRoot`: a bucket, or one added later) has its
objects fetched into a work folder first (`service.imports.object_import`),
through the interface alone.
"""

from __future__ import annotations

from service.imports.checks import CheckRequest
from service.imports.flow import Imported, ImportHooks, import_path
from service.imports.object_import import import_object
from service.imports.parts import ImportParts
from service.store.folder_root import FolderRoot


async def import_from_root(parts: ImportParts, tenant: str, path: str, hooks: ImportHooks, checks: CheckRequest | None = None) -> Imported:
    """Import the model a client's `path` names under the data root."""
    root = parts.data_root
    if isinstance(root, FolderRoot):
        return await import_path(parts, root, tenant, path, hooks, checks)
    return await import_object(parts, root, tenant, path, hooks, checks)

