"""The files of one model, as a folder: a request's work folder, a model's
folder in the local store, or a content backend's local copy.

Owns `ModelFolder`, which names each file (nobody else writes a file name of
a model's folder):
    summary.json    the bounded summary, served as is
    catalog.sqlite  the tensor catalogue (`service.tasks.catalog_format`)
    converted.bin   converted tensor bytes (typed fields, strings), one after another
    graph.json      the resolved graph, made on first request
    files/...       an uploaded model (model.onnx) and its external data (external/...)
    record.json     the stored record, and
    lru             its mtime the model's last use, its text the bytes it
                    takes: the file index of releases before the SQL index
                    (read once, by `service.store.sql.carry_over`)
"""

from __future__ import annotations

from pathlib import Path

RECORD_FILE = "record.json"
LRU_FILE = "lru"


class ModelFolder:
    """The files of one model's folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.record = root / RECORD_FILE
        self.summary = root / "summary.json"
        self.catalog = root / "catalog.sqlite"
        self.converted = root / "converted.bin"
        self.graph = root / "graph.json"
        self.files = root / "files"
        self.upload_model = self.files / "model.onnx"
        self.upload_external = self.files / "external"
        self.lru = root / LRU_FILE

    def relative(self, path: Path) -> str:
        """`path` (inside this folder) as the record stores it."""
        return str(path.relative_to(self.root))

    def relative_to_files(self, path: Path) -> str:
        """`path` (inside `files`) relative to it, "/"-separated."""
        return path.relative_to(self.files).as_posix()
