"""Content in the local store: one folder per model under `models/`.

Owns `LocalContent` (`service.store.interface.Content`): a work folder is
fsynced and renamed in whole; the graph is renamed in once; removal renames
the folder into the work area first, so no reader sees half a model. The
files tensors are read from stay open across requests (`OpenFiles`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from service.store.byte_source import ByteSource, FileSource
from service.store.files import MODEL_ID, fsync_dir, fsync_tree
from service.store.layout import ModelFolder
from service.store.open_files import OpenFiles
from service.store.records import SourceFile
from service.store.work_area import WorkArea


class LocalContent:
    on_local_disk = True  # the models folder is beside the work area

    def __init__(self, root: Path, work_area: WorkArea) -> None:
        self.models = root / "models"
        self.models_text = str(self.models)
        self.work_area = work_area
        self.files = OpenFiles()  # the files tensors are served from, kept open

    def open(self) -> None:
        self.models.mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        self.files.close()

    def check(self) -> None:
        pass  # a local folder: the readiness probe writes to it

    def new_place(self, model_id: str) -> str:
        return model_id

    def prepare(self, place: str, work: ModelFolder) -> None:
        fsync_tree(work.root)

    def install(self, place: str, work: ModelFolder) -> None:
        leftover = self.remove(place)  # an interrupted commit's, if any
        if leftover is not None:
            leftover()
        os.rename(work.root, self.models / place)
        fsync_dir(self.models)

    def discard(self, place: str) -> None:
        pass  # nothing left the work folder

    def places(self) -> list[str]:
        return [entry.name for entry in self.models.iterdir() if entry.is_dir() and MODEL_ID.fullmatch(entry.name)]

    def remove(self, place: str) -> Callable[[], None] | None:
        trash = self.work_area.trash(f"removed-{place}")
        try:
            os.rename(self._folder(place).root, trash)
        except FileNotFoundError:
            return None
        fsync_dir(self.models)
        return lambda: shutil.rmtree(trash, ignore_errors=True)

    def has_graph(self, place: str) -> bool:
        return self._folder(place).graph.exists()

    def add_graph(self, place: str, rendered: Path) -> None:
        folder = self._folder(place)
        os.rename(rendered, folder.graph)
        fsync_dir(folder.root)

    def summary(self, place: str) -> bytes:
        return self._folder(place).summary.read_bytes()

    def catalog(self, place: str) -> Path:
        return self._folder(place).catalog

    def open_graph(self, place: str) -> int:
        return os.open(self._folder(place).graph, os.O_RDONLY | os.O_CLOEXEC)

    @contextmanager
    def model_files(self, place: str) -> Iterator[ModelFolder]:
        yield self._folder(place)

    def forget(self, place: str) -> None:
        self.files.forget(f"{self.models_text}/{place}")

    def _folder(self, place: str) -> ModelFolder:
        if not MODEL_ID.fullmatch(place):
            raise KeyError(place)
        return ModelFolder(self.models / place)

    def open_file(self, place: str, item: SourceFile) -> ByteSource:
        if not MODEL_ID.fullmatch(place):
            raise KeyError(place)
        return FileSource(self.files.borrow(f"{self.models_text}/{place}", item))  # every tensor GET: no Path objects
