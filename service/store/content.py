"""Each model's immutable content, as objects of any `Blobs` backend.

Owns `Content`: where a model's files go and how they are read, written
once for every backend. A commit of model `<id>` puts every file of its
work folder under `models/<id>/<generation>/` (`ModelFolder`'s names below
that: files/..., summary.json, catalog.sqlite, converted.bin, graph.json),
the generation 16 random hex digits, so a re-import after a removal, or two
processes committing the same bytes at once, never share an object. The
objects are put before the index's lock is taken; the index's record names
the place, and only a recorded place is ever read. What no record names is
garbage (`Store.collect_garbage`).

A local store written before generations keeps its models at
`models/<id>/` (the place is the id): read and removed alike, its keys told
from a later generation's by their second segment.

Reads: the summary from a local file, remembered (it never changes); the
catalogue and the graph as local files (`Blobs.local_path`: a bucket's
cached copies); tensor bytes by range (`Blobs.reader`); an upload's files
copied into a work folder for the worker that reads them again.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from service.errors import TensorSourceChanged
from service.store.byte_source import ByteSource
from service.store.files import MODEL_ID
from service.store.interface import Blobs
from service.store.layout import ModelFolder
from service.store.records import SourceFile
from service.store.work_area import WorkArea

MODELS = "models/"
GENERATION = re.compile(r"[0-9a-f]{16}")
SUMMARIES_KEPT = 1024
PUTS_AT_ONCE = 4  # a commit's files put together (uploads overlap; a folder's fsyncs share a journal commit)


def is_place(place: str) -> bool:
    """`<model id>/<16 hex digits>` (what `new_place` makes), or a model id alone (a folder store's from before generations)."""
    model_id, _, generation = place.partition("/")
    return MODEL_ID.fullmatch(model_id) is not None and (not generation or GENERATION.fullmatch(generation) is not None)


def place_of(key: str) -> str | None:
    """The place a key below `models/` belongs to; None for a key no commit makes."""
    parts = key[len(MODELS) :].split("/") if key.startswith(MODELS) else []
    if len(parts) < 2:
        return None
    place = f"{parts[0]}/{parts[1]}" if len(parts) > 2 and GENERATION.fullmatch(parts[1]) else parts[0]
    return place if is_place(place) else None


class Content:
    def __init__(self, blobs: Blobs, work_area: WorkArea) -> None:
        self.blobs = blobs
        self.work_area = work_area
        self.summaries: OrderedDict[str, bytes] = OrderedDict()
        self.lock = threading.Lock()

    @property
    def on_local_disk(self) -> bool:
        """The content takes room on the work area's file system (evicting it frees some)."""
        return self.blobs.local

    def open(self) -> None:
        self.blobs.open()

    def close(self) -> None:
        self.blobs.close()

    def check(self) -> None:
        """StorageUnavailable if the content cannot be reached now (readiness)."""
        self.blobs.check()

    # --- places and keys

    @staticmethod
    def new_place(model_id: str) -> str:
        """Where a commit of `model_id` puts its content."""
        return f"{model_id}/{secrets.token_hex(8)}"

    @staticmethod
    def _folder(place: str) -> str:
        if not is_place(place):
            raise KeyError(place)
        return MODELS + place

    def _keys(self, place: str) -> list[str]:
        """Every object of the place (not a later generation's, below a place that is an id alone)."""
        return [key for key in self.blobs.keys(self._folder(place) + "/") if place_of(key) == place]

    def places(self) -> list[str]:
        """Every place with objects, recorded or not (an interrupted commit
        leaves one unrecorded): a listing of the whole store, which only
        `gc --full` and a local store's start make."""
        found = {place_of(key) for key in self.blobs.keys(MODELS)}
        return sorted(place for place in found if place is not None)

    # --- writing

    def prepare(self, place: str, work: ModelFolder) -> None:
        """Put every file of a finished work folder at `place`, outside the
        index's lock: garbage until a record names the place."""
        folder = self._folder(place)
        paths = [Path(parent) / name for parent, _, names in os.walk(work.root) for name in names]

        def put(path: Path) -> None:
            self.blobs.put(f"{folder}/{work.relative(path)}", path)

        with ThreadPoolExecutor(min(PUTS_AT_ONCE, max(1, len(paths)))) as puts:
            list(puts.map(put, paths))

    def discard(self, place: str) -> None:
        """A prepared place that was not recorded (the model was stored meanwhile, or the commit failed)."""
        self.blobs.delete(self._keys(place))

    def remove(self, place: str) -> Callable[[], None]:
        """The call that deletes the place's objects (outside the index's lock,
        after the record that named it is dropped)."""
        self._folder(place)  # a valid place, or KeyError
        return lambda: self.discard(place)

    def has_graph(self, place: str) -> bool:
        folder = self._folder(place)
        return f"{folder}/graph.json" in self.blobs.keys(folder + "/")  # one request, as a stat would be

    def add_graph(self, place: str, rendered: Path) -> None:
        """A rendered graph document becomes the model's (the index's lock held; it has none)."""
        self.blobs.put(f"{self._folder(place)}/graph.json", rendered)

    def forget(self, place: str) -> None:
        """Drop what this process remembers of a removed place."""
        with self.lock:
            self.summaries.pop(place, None)

    # --- reading

    def summary(self, place: str) -> bytes:
        """The stored summary's bytes; FileNotFoundError if the model is gone."""
        with self.lock:
            known = self.summaries.get(place)
        if known is not None:
            return known
        data = self.blobs.local_path(f"{self._folder(place)}/summary.json").read_bytes()
        with self.lock:
            self.summaries[place] = data
            while len(self.summaries) > SUMMARIES_KEPT:
                self.summaries.popitem(last=False)
        return data

    def catalog(self, place: str) -> Path:
        """The catalogue as a local file; FileNotFoundError if it is gone."""
        return self.blobs.local_path(f"{self._folder(place)}/catalog.sqlite")

    def open_graph(self, place: str) -> int:
        """An open descriptor of the graph document; FileNotFoundError if it has none (or is gone)."""
        return os.open(self.blobs.local_path(f"{self._folder(place)}/graph.json"), os.O_RDONLY | os.O_CLOEXEC)

    @contextmanager
    def model_files(self, place: str) -> Iterator[ModelFolder]:
        """The model's uploaded files as a local folder, for a worker to read
        again: a folder store's own, read in place where its files are laid
        out as their keys (a removal may delete them under the worker, which
        then finds no file), else copied into a work folder, removed at the
        end of the block. FileNotFoundError if the
        place has no files, or one is removed while they are copied (a
        removal deletes its objects outside the index's lock)."""
        prefix = f"{self._folder(place)}/files/"
        if self.blobs.local:  # files on this machine, laid out as their keys: read in place (no copy of the model's size)
            model = self.blobs.local_path(prefix + "model.onnx")
            in_place = ModelFolder(model.parents[1])
            if in_place.upload_model == model:
                yield in_place
                return
        with self.work_area.work_folder() as folder:
            keys = [key for key in self.blobs.keys(prefix) if place_of(key) == place and _plain(key[len(prefix) :])]
            if not keys:
                raise FileNotFoundError(f"no files at {place}")
            for key in keys:
                self.blobs.fetch(key, folder.files / key[len(prefix) :])
            yield folder

    def open_file(self, place: str, item: SourceFile) -> ByteSource:
        """A stored file the record names, to read by range."""
        if not _plain(item.path):
            raise TensorSourceChanged("the record names a file outside the model")
        return self.blobs.reader(self._folder(place), item)


def _plain(relative: str) -> bool:
    """A relative path with no empty, "." or ".." segment: one that stays below its folder."""
    return all(part not in ("", ".", "..") for part in relative.split("/"))
