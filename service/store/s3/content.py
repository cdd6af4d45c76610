"""Content on object storage: each model's files as objects under one prefix.

Owns `S3Content` (`service.store.interface.Content`). A commit's files go to
`models/<id>/<generation>/<path>` (the generation: 16 random hex digits, so
a re-import after a removal, or two replicas committing the same bytes at
once, never share an object), uploaded before the index's lock is taken;
the index's record names the place, and only a recorded place is ever read.
What no record names is garbage (`Store.collect_garbage`). Reads: the
summary in one GET (remembered: it never changes), the catalogue and the
graph from the local cache (`LocalCache`), tensor bytes by ranged GETs
(`ObjectSource`), an upload's files downloaded to a folder for the worker
that renders the graph.
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

import obstore

from service.errors import TensorSourceChanged
from service.store.byte_source import ByteSource
from service.store.files import MODEL_ID
from service.store.layout import ModelFolder
from service.store.records import SourceFile
from service.store.s3.local_cache import LocalCache
from service.store.s3.objects import ObjectSource, RecentReads, connect, reachable
from service.store.work_area import WorkArea

MODELS = "models/"
GENERATION = re.compile(r"[0-9a-f]{16}")
SUMMARIES_KEPT = 1024
UPLOADS_AT_ONCE = 4


class S3Content:
    on_local_disk = False  # in the bucket

    def __init__(self, bucket: str, prefix: str, cache: LocalCache, work_area: WorkArea) -> None:
        self.store = connect(bucket, prefix)
        self.cache = cache
        self.work_area = work_area
        self.summaries: OrderedDict[str, bytes] = OrderedDict()
        self.recent = RecentReads()
        self.lock = threading.Lock()

    def open(self) -> None:
        self.cache.open()
        self.check()

    def close(self) -> None:
        pass

    def check(self) -> None:
        with reachable():
            obstore.list_with_delimiter(self.store, MODELS + "-/")  # a listing of nothing: one cheap request

    # --- places and keys

    def new_place(self, model_id: str) -> str:
        return f"{model_id}/{secrets.token_hex(8)}"

    @staticmethod
    def _key(place: str, relative: str) -> str:
        if not _is_place(place):
            raise KeyError(place)
        return f"{MODELS}{place}/{relative}"

    # --- writing

    def prepare(self, place: str, work: ModelFolder) -> None:
        """Every file of the work folder, uploaded at once (each large one in parts by obstore)."""
        paths = [Path(folder) / name for folder, _, names in os.walk(work.root) for name in names]

        def put(path: Path) -> None:
            with reachable():
                obstore.put(self.store, self._key(place, work.relative(path)), path)

        with ThreadPoolExecutor(min(UPLOADS_AT_ONCE, max(1, len(paths)))) as uploads:
            list(uploads.map(put, paths))

    def install(self, place: str, work: ModelFolder) -> None:
        pass  # uploaded by prepare; the index's record makes it stored

    def discard(self, place: str) -> None:
        self._delete_all(place)

    def places(self) -> list[str]:
        """From the objects themselves (a listing by delimiter would also show
        the empty "folders" some servers, SeaweedFS among them, keep)."""
        found: dict[str, None] = {}
        with reachable():
            for batch in obstore.list(self.store, MODELS, chunk_size=1000):
                for meta in batch:
                    model_id, _, rest = meta["path"][len(MODELS) :].partition("/")
                    found[f"{model_id}/{rest.partition('/')[0]}"] = None
        return [place for place in found if _is_place(place)]  # what else is under models/ is not ours to remove

    def remove(self, place: str) -> Callable[[], None] | None:
        self._key(place, "")  # a valid place, or KeyError
        return lambda: self._delete_all(place)

    def _delete_all(self, place: str) -> None:
        prefix = self._key(place, "")
        with reachable():
            for batch in obstore.list(self.store, prefix, chunk_size=1000):
                obstore.delete(self.store, [meta["path"] for meta in batch])

    def has_graph(self, place: str) -> bool:
        try:
            with reachable():
                obstore.head(self.store, self._key(place, "graph.json"))
        except FileNotFoundError:
            return False
        return True

    def add_graph(self, place: str, rendered: Path) -> None:
        with reachable():
            obstore.put(self.store, self._key(place, "graph.json"), rendered)
        rendered.unlink()

    # --- reading

    def summary(self, place: str) -> bytes:
        with self.lock:
            known = self.summaries.get(place)
        if known is not None:
            return known
        with reachable():
            data = bytes(obstore.get(self.store, self._key(place, "summary.json")).bytes())
        with self.lock:
            self.summaries[place] = data
            while len(self.summaries) > SUMMARIES_KEPT:
                self.summaries.popitem(last=False)
        return data

    def _download(self, key: str) -> Callable[[Path], None]:
        def fill(path: Path) -> None:
            with reachable(), open(path, "wb") as out:
                for chunk in obstore.get(self.store, key).stream(min_chunk_size=1 << 20):
                    out.write(chunk)

        return fill

    def catalog(self, place: str) -> Path:
        return self.cache.get(LocalCache.name(place, "catalog.sqlite"), self._download(self._key(place, "catalog.sqlite")))

    def open_graph(self, place: str) -> int:
        path = self.cache.get(LocalCache.name(place, "graph.json"), self._download(self._key(place, "graph.json")))
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    @contextmanager
    def model_files(self, place: str) -> Iterator[ModelFolder]:
        """FileNotFoundError if the place has no files (removed), or one is
        removed between the listing and its download (a DELETE's removal,
        which runs outside the index's lock, racing the copy)."""
        prefix = self._key(place, "files/")
        with self.work_area.work_folder() as folder:
            copied = 0
            with reachable():
                for batch in obstore.list(self.store, prefix, chunk_size=1000):
                    for meta in batch:
                        relative = meta["path"][len(prefix) :]
                        if relative.startswith("/") or ".." in relative.split("/"):
                            continue  # not a file a commit put there
                        target = folder.files / relative
                        target.parent.mkdir(parents=True, exist_ok=True)
                        self._download(meta["path"])(target)
                        copied += 1
            if not copied:
                raise FileNotFoundError(f"no files at {place}")
            yield folder

    def forget(self, place: str) -> None:
        with self.lock:
            self.summaries.pop(place, None)
        self.cache.drop(LocalCache.name(place, ""))

    def open_file(self, place: str, item: SourceFile) -> ByteSource:
        if item.path.startswith("/") or ".." in item.path.split("/"):
            raise TensorSourceChanged("the record names a file outside the model")
        return ObjectSource(self.store, self._key(place, item.path), recent=self.recent)


def _is_place(place: str) -> bool:
    """`<model id>/<16 hex digits>`: a place `new_place` makes."""
    model_id, _, generation = place.partition("/")
    return MODEL_ID.fullmatch(model_id) is not None and GENERATION.fullmatch(generation) is not None
