"""The object-storage client: obstore's S3 store, its errors, ranged reads.

Owns `connect` (an `S3Store` for a bucket and prefix, configured from the
standard AWS environment: `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
`AWS_REGION`), `reachable` (errors of the storage as `StorageUnavailable`,
a missing object as `FileNotFoundError`) and `ObjectSource`, one object's
bytes as a `ByteSource`: a small range in one GET, a large one streamed from
one ranged GET in 1 MiB chunks (memory bounded by a chunk), made before the
response starts (`begin`).

obstore was chosen by measurement against boto3 and minio
(bench/s3_clients.py, bench/README.md): the fastest small PUT and GET, ranged
GETs as fast as any, and a tenth of their import time. Requests time out
quickly and are retried a little, so a storage that is down answers 503 in
seconds, not minutes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

import obstore
from obstore.exceptions import BaseError, PreconditionError
from obstore.store import S3Store

from service.errors import DomainError, StorageUnavailable, TensorSourceChanged, TensorSourceGone, bounded

if TYPE_CHECKING:
    from obstore import GetOptions, GetResult
    from obstore.store import S3Config

log = logging.getLogger("service.store")
CHUNK_BYTES = 1 << 20
TIMEOUT = timedelta(seconds=30)  # one request's whole time (a large ranged read streams within it per chunk)
CONNECT_TIMEOUT = timedelta(seconds=3)
RETRIES = 2


def connect(bucket: str, prefix: str, environ: Mapping[str, str] | None = None) -> S3Store:
    """The store of `s3://bucket/prefix`, from the AWS environment."""
    env = os.environ if environ is None else environ
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    config: S3Config = {
        "region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        "virtual_hosted_style_request": False,  # path-style: what S3-compatible servers all answer
    }
    if endpoint:
        config["endpoint"] = endpoint
    if env.get("AWS_ACCESS_KEY_ID"):
        config["access_key_id"] = env["AWS_ACCESS_KEY_ID"]
        config["secret_access_key"] = env.get("AWS_SECRET_ACCESS_KEY", "")
    if env.get("AWS_SESSION_TOKEN"):
        config["session_token"] = env["AWS_SESSION_TOKEN"]
    return S3Store(
        bucket,
        prefix=prefix or None,
        config=config,
        client_options={
            "allow_http": bool(endpoint and endpoint.startswith("http://")),
            "timeout": TIMEOUT,
            "connect_timeout": CONNECT_TIMEOUT,
        },
        retry_config={"max_retries": RETRIES, "retry_timeout": timedelta(seconds=10)},
    )


@contextlib.contextmanager
def reachable() -> Iterator[None]:
    """Errors of the object storage (it does not answer, refuses our
    credentials, answers 5xx) as `StorageUnavailable`, whose detail names
    neither the endpoint nor the bucket (the log has the whole error); a
    missing object (`FileNotFoundError`) and a failed condition
    (`PreconditionError`) pass, as do the service's own errors."""
    try:
        yield
    except (FileNotFoundError, PreconditionError, DomainError):
        raise
    except (BaseError, OSError) as error:
        log.warning("object storage: %s", bounded(str(error), 2000))
        raise StorageUnavailable(f"object storage does not answer ({type(error).__name__})") from None


class RecentReads:
    """Small reads of immutable objects, the most recent kept in memory (at
    most `max_bytes` in all): a tensor read again (an explorer's page, a
    client's retry) costs no second GET. Only for a store's objects, whose
    place never holds other bytes; never for a data root's, which may change."""

    def __init__(self, max_bytes: int = 32 << 20, largest: int = 256 << 10) -> None:
        self.max_bytes = max_bytes
        self.largest = largest
        self.kept: OrderedDict[tuple[str, int, int], bytes] = OrderedDict()
        self.total = 0
        self.lock = threading.Lock()

    def get(self, key: tuple[str, int, int]) -> bytes | None:
        with self.lock:
            data = self.kept.get(key)
            if data is not None:
                self.kept.move_to_end(key)
            return data

    def put(self, key: tuple[str, int, int], data: bytes) -> None:
        if len(data) > self.largest:
            return
        with self.lock:
            if key in self.kept:
                return
            self.kept[key] = data
            self.total += len(data)
            while self.total > self.max_bytes:
                _, dropped = self.kept.popitem(last=False)
                self.total -= len(dropped)


class ObjectSource:
    """One object's bytes: a stored one (immutable: its size was recorded at
    import; small reads kept in `recent`), or a data root's, read only while
    its ETag is the recorded one (`etag`: sent as If-Match, and checked in
    the answer, for servers that ignore the condition; another is
    TensorSourceChanged)."""

    def __init__(self, store: S3Store, key: str, etag: str = "", recent: RecentReads | None = None) -> None:
        self.store = store
        self.key = key
        self.etag = etag
        self.recent = recent
        self.begun: tuple[tuple[int, int], GetResult] | None = None  # (offset, length) of the GET `begin` made, its answer

    def _options(self, offset: int, length: int) -> GetOptions:
        options: GetOptions = {"range": (offset, offset + length)}
        if self.etag:
            options["if_match"] = self.etag
        return options

    def _checked(self, result: GetResult) -> GetResult:
        if self.etag and result.meta["e_tag"] != self.etag:  # a server that ignored If-Match
            raise _changed()
        return result

    def _get(self, offset: int, length: int) -> GetResult:
        try:
            return self._checked(obstore.get(self.store, self.key, options=self._options(offset, length)))
        except PreconditionError:
            raise _changed() from None

    async def _get_async(self, offset: int, length: int) -> GetResult:
        try:
            return self._checked(await obstore.get_async(self.store, self.key, options=self._options(offset, length)))
        except PreconditionError:
            raise _changed() from None

    def read(self, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        kept = self.recent.get((self.key, offset, length)) if self.recent is not None else None
        if kept is not None:
            return kept
        with _gone_as_410(), reachable():
            data = bytes(self._get(offset, length).bytes())
        if self.recent is not None and len(data) == length:
            self.recent.put((self.key, offset, length), data)
        return data

    def begin(self, offset: int, length: int) -> None:
        """The ranged GET made now, before the response's headers: an object
        deleted by then (its model removed, a data root's object replaced) is
        410 or 409, not a 200 whose body is cut; once its answer has begun, the
        stream is read from it."""
        if length > 0:
            with _gone_as_410(), reachable():
                self.begun = ((offset, length), self._get(offset, length))

    async def chunks(self, offset: int, length: int) -> AsyncIterator[bytes | memoryview]:
        if length <= 0:
            return
        begun, self.begun = self.begun, None
        with _gone_as_410(), reachable():
            result = begun[1] if begun is not None and begun[0] == (offset, length) else await self._get_async(offset, length)
            async for chunk in result.stream(min_chunk_size=CHUNK_BYTES):
                yield bytes(chunk)

    def close(self) -> None:
        pass  # nothing held between requests


def _changed() -> TensorSourceChanged:
    return TensorSourceChanged("the object holding the tensor changed since the import; import the model again")


@contextlib.contextmanager
def _gone_as_410() -> Iterator[None]:
    try:
        yield
    except FileNotFoundError:
        raise TensorSourceGone("the object holding the tensor no longer exists; import the model again") from None
