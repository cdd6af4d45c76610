"""The object-storage client: obstore's S3 store, its errors, ranged reads.

Owns `connect` (an `S3Store` for a bucket and prefix, configured from the
standard AWS environment: `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
`AWS_REGION`), `Place` (which bucket, endpoint and access key id a store
uses: what an error names), `reachable` (errors of the storage as
`StorageUnavailable`, a missing object as `FileNotFoundError`),
`create_bucket` (the one request obstore does not make: a signed
CreateBucket) and `ObjectSource`, one object's bytes as a `ByteSource`: a
small range in one GET, a large one streamed from one ranged GET in 1 MiB
chunks (memory bounded by a chunk), made before the response starts (`begin`).

An error says what is wrong: the storage does not answer (connection
refused, a name that does not resolve, a timeout), the bucket does not
exist, or the storage refuses the access key. Its `detail`, which a client
may see, says it in kind; its `operator` text, for `/readyz` and the log,
names the endpoint, the bucket and the access key id (never the secret).

obstore was chosen by measurement against boto3 and minio
(bench/s3_clients.py, bench/README.md): the fastest small PUT and GET, ranged
GETs as fast as any, and a tenth of their import time. Requests time out
quickly and are retried a little, so a storage that is down answers 503 in
seconds, not minutes.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import hmac
import logging
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import obstore
from obstore.exceptions import BaseError, PermissionDeniedError, PreconditionError, UnauthenticatedError
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
CREATE_TIMEOUT_SECONDS = 10.0
NO_BUCKET = "has no bucket"  # in the operator text of a missing bucket's error (`what_is_wrong`)


@dataclass(frozen=True)
class Place:
    """Where a store's objects are, as an operator names it."""

    bucket: str
    endpoint: str  # the endpoint's URL, or AWS's for the region
    key_id: str  # the access key id ('' for none: the environment's other credentials)
    region: str

    @classmethod
    def of(cls, bucket: str, environ: Mapping[str, str] | None = None) -> Place:
        env = os.environ if environ is None else environ
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or f"https://s3.{region}.amazonaws.com"
        return cls(bucket, endpoint.rstrip("/"), env.get("AWS_ACCESS_KEY_ID", ""), region)


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


def _refused_credentials(text: str) -> str:
    """The S3 error code of a refusal of the credentials in an error's text ('' if none)."""
    for code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken", "InvalidToken", "AllAccessDisabled"):
        if code in text:
            return code
    return ""


def what_is_wrong(error: BaseException, place: Place | None) -> StorageUnavailable:
    """The StorageUnavailable of an error of the storage: what is wrong, in kind
    for a client, and for the operator naming the endpoint, bucket and key id."""
    text = str(error)
    where = f" ({place.endpoint}, bucket {place.bucket!r})" if place is not None else ""
    if "NoSuchBucket" in text:
        operator = (
            f"object storage {NO_BUCKET} {place.bucket!r} at {place.endpoint}: create it, or start with --create-bucket"
            if place is not None
            else f"object storage {NO_BUCKET} of that name"
        )
        return StorageUnavailable("object storage has no bucket of the store's name (the operator must create it)", operator=operator)
    code = _refused_credentials(text)
    if code or isinstance(error, (PermissionDeniedError, UnauthenticatedError)):
        key = f"key {place.key_id!r}" if place is not None and place.key_id else "the service's credentials"
        operator = f"object storage refuses {key}: access denied ({code or type(error).__name__}){where}"
        return StorageUnavailable("object storage refuses the service's credentials (access denied)", operator=operator)
    if "Connection refused" in text or "ConnectionRefused" in text:
        reason = "connection refused"
    elif "dns error" in text or "failed to lookup address" in text:
        reason = "its host name does not resolve"
    elif "timed out" in text or "TimedOut" in text or "operation timed out" in text:
        reason = "no answer in time"
    elif isinstance(error, OSError) and not isinstance(error, BaseError):
        reason = f"{type(error).__name__}: {error}"
    else:
        reason = type(error).__name__
    return StorageUnavailable(f"object storage does not answer ({reason})", operator=f"object storage does not answer: {reason}{where}")


@contextlib.contextmanager
def reachable(place: Place | None = None) -> Iterator[None]:
    """Errors of the object storage (it does not answer, refuses our
    credentials, has no such bucket, answers 5xx) as `StorageUnavailable`
    (`what_is_wrong`: its detail names neither the endpoint nor the bucket,
    its operator text and the log do); a missing object (`FileNotFoundError`)
    and a failed condition (`PreconditionError`) pass, as do the service's own errors."""
    try:
        yield
    except (FileNotFoundError, PreconditionError, DomainError):
        raise
    except (BaseError, OSError) as error:
        log.warning("object storage: %s", bounded(str(error), 2000))
        raise what_is_wrong(error, place) from None


def create_bucket(place: Place, environ: Mapping[str, str] | None = None) -> None:
    """Make the bucket (S3's CreateBucket, signed with AWS Signature V4 from the
    environment's keys, path-style as every request here); StorageUnavailable
    saying why if the storage refuses."""
    env = os.environ if environ is None else environ
    url = f"{place.endpoint}/{urllib.parse.quote(place.bucket)}"
    body = b""
    if place.region != "us-east-1" and "amazonaws.com" in place.endpoint:
        body = (
            '<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<LocationConstraint>{place.region}</LocationConstraint></CreateBucketConfiguration>"
        ).encode()
    headers = _signed("PUT", url, body, env, place.region)
    request = urllib.request.Request(url, data=body, method="PUT", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=CREATE_TIMEOUT_SECONDS):  # the store's own endpoint
            pass
    except urllib.error.HTTPError as error:
        said = error.read(4096).decode(errors="replace")
        if "BucketAlreadyOwnedByYou" in said or "BucketAlreadyExists" in said:
            return  # another replica made it meanwhile
        log.warning("object storage refused to create the bucket: %s %s", error.code, bounded(said, 2000))
        problem = what_is_wrong(OSError(said), place)
        raise StorageUnavailable(
            f"object storage refused to create the store's bucket ({error.code})",
            operator=f"object storage at {place.endpoint} refused to create bucket {place.bucket!r} ({error.code}): {problem.operator}",
        ) from None
    except OSError as error:
        raise what_is_wrong(error, place) from None
    log.info("created the bucket %s at %s (--create-bucket)", place.bucket, place.endpoint)


def _signed(method: str, url: str, body: bytes, env: Mapping[str, str], region: str) -> dict[str, str]:
    """AWS Signature Version 4 headers of one S3 request (no query string)."""
    parts = urllib.parse.urlsplit(url)
    now = datetime.datetime.now(datetime.UTC)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(body).hexdigest()
    headers = {"host": parts.netloc, "x-amz-content-sha256": payload, "x-amz-date": stamp}
    if env.get("AWS_SESSION_TOKEN"):
        headers["x-amz-security-token"] = env["AWS_SESSION_TOKEN"]
    names = ";".join(sorted(headers))
    canonical = "\n".join([method, parts.path or "/", "", "".join(f"{name}:{headers[name]}\n" for name in sorted(headers)), names, payload])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + env.get("AWS_SECRET_ACCESS_KEY", "")).encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    credential = f"{env.get('AWS_ACCESS_KEY_ID', '')}/{scope}"
    headers["authorization"] = f"AWS4-HMAC-SHA256 Credential={credential}, SignedHeaders={names}, Signature={signature}"
    del headers["host"]  # urllib sends it
    return headers


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

    def __init__(self, store: S3Store, key: str, etag: str = "", recent: RecentReads | None = None, place: Place | None = None) -> None:
        self.store = store
        self.key = key
        self.etag = etag
        self.recent = recent
        self.place = place  # what an error names
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
        with _gone_as_410(), reachable(self.place):
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
            with _gone_as_410(), reachable(self.place):
                self.begun = ((offset, length), self._get(offset, length))

    async def chunks(self, offset: int, length: int) -> AsyncIterator[bytes | memoryview]:
        if length <= 0:
            return
        begun, self.begun = self.begun, None
        with _gone_as_410(), reachable(self.place):
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
