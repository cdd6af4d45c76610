"""A data root in a bucket: server-side models as objects (`--data-root s3://BUCKET/PREFIX`).

Owns `BucketRoot`, the `DataRoot` (`service.store.data_root`) of a bucket. A
client's path names a key below the prefix, under the rules a folder's path
keeps (`data_root.key_of`), and an external data location names a key beside
its model's, as in a folder (`data_root.beside`). `fetch`
copies one object into a local file (the worker's scratch folder), refusing
one larger than the bytes left to the import, hashing it on the way, and
gives its identity: the key, ETag, version (where the bucket keeps them),
size and SHA-256. `open` reads a recorded object by range for as long as
it is the one recorded (an ETag condition: another is 409
`tensor-source-changed`, a missing one 410 `tensor-source-gone`), as a
folder's changed or missing file answers.
"""

from __future__ import annotations

import hashlib
import posixpath
from pathlib import Path
from typing import TYPE_CHECKING

import obstore
from obstore.exceptions import PreconditionError

from service.errors import ImportTooLarge, ModelSourceChanged, NotFound, bounded
from service.store.byte_source import ByteSource
from service.store.data_root import Entry, FetchedObject
from service.store.records import SourceFile
from service.store.s3.objects import ObjectSource, Place, connect, reachable

if TYPE_CHECKING:
    from obstore import GetOptions

CHUNK_BYTES = 1 << 20


class BucketRoot:
    local_reads = False
    local_folder = None  # its objects are fetched, never read in place
    place: Place | None = None  # what its errors name

    def __init__(self, bucket: str, prefix: str) -> None:
        self.url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        self.store = connect(bucket, prefix)
        self.place = Place.of(bucket)

    def fetch(self, key: str, target: Path, max_bytes: int, expected: SourceFile | None = None) -> FetchedObject:
        """Copy the object `key` to `target` (at most `max_bytes`, else ImportTooLarge).
        With `expected`, only that very object (its ETag): another is ModelSourceChanged."""
        options: GetOptions = {}
        if expected is not None and expected.etag:
            options["if_match"] = expected.etag
        try:
            with reachable(self.place):
                result = obstore.get(self.store, key, options=options)
                meta = result.meta
                if meta["size"] > max_bytes:
                    raise ImportTooLarge(f"the object {bounded(repr(key), 200)} has {meta['size']} bytes, more than the {max_bytes} left")
                if expected is not None and meta["e_tag"] != expected.etag:
                    raise PreconditionError("another ETag")
                digest, size = hashlib.sha256(), 0
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "wb") as out:
                    for chunk in result.stream(min_chunk_size=CHUNK_BYTES):
                        digest.update(chunk)
                        size += out.write(chunk)
        except FileNotFoundError:
            raise NotFound(f"no such object under the data root: {bounded(repr(key), 200)}") from None
        except PreconditionError:
            raise ModelSourceChanged(f"the object {bounded(repr(key), 200)} changed since the import; import it again") from None
        return FetchedObject(key, meta["e_tag"] or "", str(meta["version"] or ""), size, digest.hexdigest())

    def open(self, item: SourceFile) -> ByteSource:
        return ObjectSource(self.store, item.path, item.etag, place=self.place)

    def list(self, prefix: str) -> list[Entry]:
        with reachable(self.place):
            found = obstore.list_with_delimiter(self.store, prefix=prefix.strip("/") or None)
        entries = [Entry(posixpath.basename(item["path"]), False, item["size"]) for item in found["objects"]]
        entries += [Entry(posixpath.basename(prefix.rstrip("/")), True, 0) for prefix in found["common_prefixes"]]
        return sorted(entries, key=lambda entry: entry.name)

    def close(self) -> None:
        pass  # obstore's client holds no file or connection that outlives a request
