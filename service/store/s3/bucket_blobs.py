"""Objects in a bucket: the fleet store's bytes (`--store s3://BUCKET/PREFIX`).

Owns `BucketBlobs` (`service.store.interface.Blobs`): the object `a/b/c` is
the key `PREFIX/a/b/c`, put from a file (in one PUT up to 16 MiB, else
in parts at once, by obstore), read by ranged GETs (`ObjectSource`, the most recent small reads
kept: an object never changes), and copied to a local file where it must be
one (a catalogue to query, a graph to send) in the bounded `LocalCache`,
which a delete empties of it. A delete of many keys is a request per
thousand. `open` and `check` ask the bucket (one listing of nothing): a
missing one is made with `create_bucket` (`--create-bucket`), else named
in the error, as are a refused access key and an endpoint that does not
answer (`service.store.s3.objects.what_is_wrong`).
"""

from __future__ import annotations

from pathlib import Path

import obstore

from service.errors import StorageUnavailable
from service.store.byte_source import ByteSource
from service.store.records import SourceFile
from service.store.s3.local_cache import LocalCache
from service.store.s3.objects import NO_BUCKET, ObjectSource, Place, RecentReads, connect, create_bucket, reachable

CHUNK_BYTES = 1 << 20
PUT_PART_BYTES = 16 << 20  # a resumable upload's 8 MiB part goes in one PUT
DELETES_AT_ONCE = 1000  # S3's DeleteObjects takes at most as many


class BucketBlobs:
    local = False

    def __init__(self, bucket: str, prefix: str, cache: LocalCache, *, create_bucket: bool = False) -> None:
        self.store = connect(bucket, prefix)
        self.place = Place.of(bucket)
        self.cache = cache
        self.recent = RecentReads()
        self.create_bucket = create_bucket  # make the bucket if it is missing

    def open(self) -> None:
        self.cache.open()
        try:
            self.check()
        except StorageUnavailable as error:
            if not (self.create_bucket and NO_BUCKET in error.operator):
                raise
            create_bucket(self.place)
            self.check()

    def close(self) -> None:
        pass  # obstore's client holds no file or connection that outlives a request

    def check(self) -> None:
        with reachable(self.place):
            obstore.list_with_delimiter(self.store, "models/-/")  # a listing of nothing: one cheap request

    def put(self, key: str, source: Path) -> None:
        with reachable(self.place):
            obstore.put(self.store, key, source, chunk_size=PUT_PART_BYTES)  # one PUT up to a part's size, else parts at once
        source.unlink()

    def reader(self, folder: str, item: SourceFile) -> ByteSource:
        return ObjectSource(self.store, f"{folder}/{item.path}", recent=self.recent, place=self.place)

    def local_path(self, key: str) -> Path:
        return self.cache.get(_cache_name(key), lambda path: self.fetch(key, path))  # a new file each time

    def fetch(self, key: str, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        with reachable(self.place), open(target, "ab") as out:
            for chunk in obstore.get(self.store, key).stream(min_chunk_size=CHUNK_BYTES):
                out.write(chunk)

    def keys(self, folder: str) -> list[str]:
        """From the objects themselves (a listing by delimiter would also show
        the empty "folders" some servers, SeaweedFS among them, keep)."""
        with reachable(self.place):
            return [meta["path"] for batch in obstore.list(self.store, folder or None, chunk_size=1000) for meta in batch]

    def delete(self, keys: list[str]) -> None:
        with reachable(self.place):
            for start in range(0, len(keys), DELETES_AT_ONCE):
                obstore.delete(self.store, keys[start : start + DELETES_AT_ONCE])
        for key in keys:
            self.cache.drop(_cache_name(key))


def _cache_name(key: str) -> str:
    """`models/<id>/<generation>/catalog.sqlite` -> `models-<id>-<generation>-catalog.sqlite` (one folder, no nesting)."""
    return key.replace("/", "-")
