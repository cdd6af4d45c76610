"""Which tenant holds which model, in the local index: a folder of small files.

Owns `TenantFolders`, the tenants' part of the local index
(`service.store.local.index`), kept beside the content:

    tenants/<T>/<id>.json   tenant T holds model <id>: the name it gave the
                            model and when (written once; its mtime orders
                            the tenant's listing)
    tenants/<T>/<id>.graph  tenant T has had the model's graph rendered for
                            it once (a graph another tenant had rendered is
                            rendered again for T's first request, so its
                            timing says nothing of other tenants' views)
    tenants/<T>/<id>.checks the check stages T ran on the model (`CheckRuns`,
                            as JSON; replaced whole by each run)

where <T> is the first 32 hex digits of the SHA-256 of the tenant's name (a
name never becomes a path). Content (`models/<id>/`) is shared: two tenants
importing the same bytes hold one copy. A model is visible to a tenant only
through its own record; the store removes the content when the last record
goes, and drops the records of content it evicts. The caller serializes
changes with the index's lock.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import heapq
import os
from pathlib import Path

from service.store.files import MODEL_ID, write_file_atomically
from service.store.records import TenantRecord


@functools.lru_cache(maxsize=4096)
def tenant_folder_name(tenant: str) -> str:
    return hashlib.sha256(tenant.encode()).hexdigest()[:32]


class TenantFolders:
    def __init__(self, root: Path) -> None:
        self.root = root  # the store's tenants/ folder
        self.root_text = str(root)

    def folder(self, tenant: str) -> Path:
        return self.root / tenant_folder_name(tenant)

    def path(self, tenant: str, model_id: str) -> Path:
        if not MODEL_ID.fullmatch(model_id):
            raise KeyError(model_id)
        return self.folder(tenant) / f"{model_id}.json"

    def get(self, tenant: str, model_id: str) -> TenantRecord | None:
        if not MODEL_ID.fullmatch(model_id):
            return None
        try:
            return TenantRecord.model_validate_json(self.path(tenant, model_id).read_bytes())
        except FileNotFoundError:
            return None

    def holds(self, tenant: str, model_id: str) -> bool:
        # every tensor GET asks: one stat of a string path, no Path objects
        return MODEL_ID.fullmatch(model_id) is not None and os.path.isfile(f"{self.root_text}/{tenant_folder_name(tenant)}/{model_id}.json")

    def add(self, record: TenantRecord, model_id: str) -> bool:
        """Record that the tenant holds the model; False if it did already."""
        path = self.path(record.tenant, model_id)
        if path.exists():
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomically(path, record.model_dump_json().encode())
        return True

    def _graph_mark(self, tenant: str, model_id: str) -> Path:
        return self.path(tenant, model_id).with_suffix(".graph")

    def _checks_path(self, tenant: str, model_id: str) -> Path:
        return self.path(tenant, model_id).with_suffix(".checks")

    def checks(self, tenant: str, model_id: str) -> bytes | None:
        if not MODEL_ID.fullmatch(model_id):
            return None
        try:
            return self._checks_path(tenant, model_id).read_bytes()
        except FileNotFoundError:
            return None

    def keep_checks(self, tenant: str, model_id: str, document: bytes) -> bool:
        """The tenant's check runs of the model, replaced; False if it does not hold it."""
        if not self.holds(tenant, model_id):
            return False
        write_file_atomically(self._checks_path(tenant, model_id), document)
        return True

    def remove(self, tenant: str, model_id: str) -> bool:
        for mark in (self._graph_mark(tenant, model_id), self._checks_path(tenant, model_id)):
            with contextlib.suppress(FileNotFoundError):
                mark.unlink()
        try:
            self.path(tenant, model_id).unlink()
        except FileNotFoundError:
            return False
        return True

    def graph_rendered(self, tenant: str, model_id: str) -> bool:
        """The model's graph was rendered for this tenant once."""
        return MODEL_ID.fullmatch(model_id) is not None and self._graph_mark(tenant, model_id).is_file()

    def mark_graph_rendered(self, tenant: str, model_id: str) -> None:
        self._graph_mark(tenant, model_id).touch()

    def holders(self) -> dict[str, set[str]]:
        """Model id -> the folders (hashed tenant names) of the tenants that hold it."""
        held: dict[str, set[str]] = {}
        for folder in self._tenant_folders():
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.name.endswith(".json"):
                        held.setdefault(entry.name.removesuffix(".json"), set()).add(folder.name)
        return held

    def held_by(self, tenant: str) -> list[str]:
        """The ids of the models the tenant holds."""
        folder = self.folder(tenant)
        if not folder.is_dir():
            return []
        with os.scandir(folder) as entries:
            return [entry.name.removesuffix(".json") for entry in entries if entry.name.endswith(".json")]

    def held_by_anyone(self, model_id: str) -> bool:
        return any((folder / f"{model_id}.json").exists() for folder in self._tenant_folders())

    def forget(self, model_id: str) -> None:
        """Drop every tenant's record of a model (its content was evicted)."""
        for folder in self._tenant_folders():
            for suffix in (".json", ".graph", ".checks"):
                with contextlib.suppress(FileNotFoundError):
                    (folder / f"{model_id}{suffix}").unlink()

    def newest(self, tenant: str, before: tuple[int, str] | None, limit: int) -> list[tuple[int, str]]:
        """(record time in ns, id) of up to `limit` of the tenant's models, newest
        first, older than `before`."""
        found: list[tuple[int, str]] = []
        folder = self.folder(tenant)
        if not folder.is_dir():
            return found
        with os.scandir(folder) as entries:
            for entry in entries:
                model_id = entry.name.removesuffix(".json")
                if not MODEL_ID.fullmatch(model_id) or not entry.name.endswith(".json"):
                    continue
                try:
                    recorded = entry.stat().st_mtime_ns
                except OSError:
                    continue
                if before is None or (recorded, model_id) < before:
                    found.append((recorded, model_id))
        return heapq.nlargest(limit, found)

    def _tenant_folders(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return [entry for entry in self.root.iterdir() if entry.is_dir()]
