"""Content in the local store: one folder per model under `models/`.

Owns `LocalContent` (`service.store.interface.Content`): a work folder is
fsynced and renamed in whole; the graph is renamed in once; removal renames
the folder into the work area first, so no reader sees half a model.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from service.paths import open_checked
from service.store.files import MODEL_ID, fsync_dir, fsync_tree
from service.store.layout import ModelFolder
from service.store.records import SourceFile
from service.store.work_area import WorkArea


class LocalContent:
    def __init__(self, root: Path, work_area: WorkArea) -> None:
        self.models = root / "models"
        self.work_area = work_area

    def open(self) -> None:
        self.models.mkdir(parents=True, exist_ok=True)

    def prepare(self, work: ModelFolder) -> None:
        fsync_tree(work.root)

    def install(self, model_id: str, work: ModelFolder) -> None:
        os.rename(work.root, self.models / model_id)
        fsync_dir(self.models)

    def exists(self, model_id: str) -> bool:
        return MODEL_ID.fullmatch(model_id) is not None and (self.models / model_id).is_dir()

    def model_ids(self) -> list[str]:
        return [entry.name for entry in self.models.iterdir() if entry.is_dir() and MODEL_ID.fullmatch(entry.name)]

    def remove(self, model_id: str) -> Callable[[], None] | None:
        trash = self.work_area.trash(f"removed-{model_id}")
        try:
            os.rename(self.folder(model_id).root, trash)
        except FileNotFoundError:
            return None
        fsync_dir(self.models)
        return lambda: shutil.rmtree(trash, ignore_errors=True)

    def has_graph(self, model_id: str) -> bool:
        return self.folder(model_id).graph.exists()

    def add_graph(self, model_id: str, rendered: Path) -> None:
        folder = self.folder(model_id)
        os.rename(rendered, folder.graph)
        fsync_dir(folder.root)

    def summary(self, model_id: str) -> bytes:
        return self.folder(model_id).summary.read_bytes()

    def folder(self, model_id: str) -> ModelFolder:
        if not MODEL_ID.fullmatch(model_id):
            raise KeyError(model_id)
        return ModelFolder(self.models / model_id)

    def open_file(self, model_id: str, item: SourceFile) -> int:
        return open_checked(str(self.folder(model_id).root), item)
