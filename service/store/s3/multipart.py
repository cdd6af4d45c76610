"""S3 multipart uploads that any process may continue: boto3's client, for the fleet's resumable uploads.

Owns `Multipart`: create a multipart upload, upload a part from a file,
complete or abort it (by its upload id, which any replica may hold), list
the multipart uploads under a prefix, and the plain objects beside them (an
upload's incomplete part: put from a file, fetched into a file, deleted;
the completed object: streamed). obstore, the service's S3 client
(`service.store.s3.objects`), does its multipart uploads within one call
and has no API to continue one by its id from another process; boto3 does,
and is imported here only, when the fleet's uploads are opened.

Configured from the same AWS environment as `objects.connect`: the endpoint
(`AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`), the keys, the session token,
the region, path-style addressing; requests time out and are retried as
briefly. A storage that does not answer, refuses the credentials or answers
5xx is `StorageUnavailable` (the detail names neither endpoint nor bucket);
a missing object or multipart upload is `FileNotFoundError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Iterator, Mapping
from typing import IO, Any

from service.errors import ServiceError, StorageUnavailable, bounded

log = logging.getLogger("service.store")

CONNECT_TIMEOUT = 3.0  # seconds, as objects.py's
READ_TIMEOUT = 30.0
ATTEMPTS = 3  # one request and two retries, as objects.py's
CHUNK_BYTES = 1 << 20
MISSING = frozenset({"NoSuchUpload", "NoSuchKey", "404", "NotFound"})


class Multipart:
    def __init__(self, bucket: str, prefix: str, environ: Mapping[str, str] | None = None) -> None:
        """`prefix`: the store's (`s3://bucket/prefix`); every key given is below it."""
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.environ = os.environ if environ is None else environ
        self._client: Any = None

    def key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}" if self.prefix else relative

    @property
    def client(self) -> Any:
        """boto3's S3 client (thread-safe), made at first use."""
        if self._client is None:
            with answering():
                self._client = _client(self.environ)
        return self._client

    # --- the multipart upload

    def create(self, key: str) -> str:
        """A new multipart upload of `key`: its upload id."""
        with answering():
            return str(self.client.create_multipart_upload(Bucket=self.bucket, Key=self.key(key))["UploadId"])

    def upload_part(self, key: str, upload_id: str, number: int, body: IO[bytes], size: int) -> str:
        """Part `number` from `body`'s first `size` bytes (a file positioned at its start); its ETag."""
        with answering():
            answer = self.client.upload_part(
                Bucket=self.bucket, Key=self.key(key), UploadId=upload_id, PartNumber=number, Body=body, ContentLength=size
            )
        return str(answer["ETag"])

    def complete(self, key: str, upload_id: str, parts: list[tuple[int, str]]) -> None:
        """Join the parts (number, ETag), in their order, into the object `key`."""
        listed = [{"PartNumber": number, "ETag": etag} for number, etag in sorted(parts)]
        with answering():
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=self.key(key), UploadId=upload_id, MultipartUpload={"Parts": listed}
            )

    def abort(self, key: str, upload_id: str) -> None:
        """Drop the multipart upload and its parts (done already: nothing to do)."""
        with contextlib.suppress(FileNotFoundError), answering():
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.key(key), UploadId=upload_id)

    def uploads(self, under: str) -> list[tuple[str, str]]:
        """(key below the store's prefix, upload id) of the multipart uploads in progress under `under`."""
        found: list[tuple[str, str]] = []
        with answering():
            pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=self.key(under))
            for page in pages:
                found += [(_relative(item["Key"], self.prefix), item["UploadId"]) for item in page.get("Uploads", [])]
        return found

    # --- plain objects

    def put(self, key: str, body: IO[bytes], size: int) -> None:
        with answering():
            self.client.put_object(Bucket=self.bucket, Key=self.key(key), Body=body, ContentLength=size)

    def size(self, key: str) -> int:
        with answering():
            return int(self.client.head_object(Bucket=self.bucket, Key=self.key(key))["ContentLength"])

    def fetch(self, key: str, into: IO[bytes], digest: hashlib._Hash | None = None) -> int:
        """Append the object's bytes to `into` (feeding `digest` each chunk); how many there were."""
        written = 0
        with answering():
            body = self.client.get_object(Bucket=self.bucket, Key=self.key(key))["Body"]
            try:
                for chunk in body.iter_chunks(CHUNK_BYTES):
                    into.write(chunk)
                    if digest is not None:
                        digest.update(chunk)
                    written += len(chunk)
            finally:
                body.close()
        return written

    def keys(self, under: str) -> list[str]:
        """The keys (below the store's prefix) of every object under `under`."""
        found: list[str] = []
        with answering():
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.key(under)):
                found += [_relative(item["Key"], self.prefix) for item in page.get("Contents", [])]
        return found

    def delete_all(self, under: str) -> None:
        """Delete every object whose key starts with `under`."""
        with answering():
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.key(under))
            for page in pages:
                keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
                if keys:
                    self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True})


def _client(env: Mapping[str, str]) -> Any:
    import boto3
    from botocore.config import Config

    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    config = Config(
        region_name=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        s3={"addressing_style": "path"},  # what S3-compatible servers all answer
        connect_timeout=CONNECT_TIMEOUT,
        read_timeout=READ_TIMEOUT,
        retries={"max_attempts": ATTEMPTS, "mode": "standard"},
        request_checksum_calculation="when_required",  # S3-compatible servers differ on the newer checksums
        response_checksum_validation="when_required",
    )
    keys: dict[str, str] = {}
    if env.get("AWS_ACCESS_KEY_ID"):
        keys = {"aws_access_key_id": env["AWS_ACCESS_KEY_ID"], "aws_secret_access_key": env.get("AWS_SECRET_ACCESS_KEY", "")}
        if env.get("AWS_SESSION_TOKEN"):
            keys["aws_session_token"] = env["AWS_SESSION_TOKEN"]
    return boto3.session.Session().client("s3", endpoint_url=endpoint or None, config=config, **keys)


def _relative(key: str, prefix: str) -> str:
    return key[len(prefix) + 1 :] if prefix and key.startswith(prefix + "/") else key


@contextlib.contextmanager
def answering() -> Iterator[None]:
    """boto3's errors as the store's (see the module comment); the service's own pass."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except ServiceError:
        raise
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", ""))
        if code in MISSING:
            raise FileNotFoundError(code) from None
        log.warning("object storage: %s", bounded(str(error), 2000))
        raise StorageUnavailable(f"object storage does not answer ({bounded(code, 60) or 'ClientError'})") from None
    except BotoCoreError as error:  # connection failures and timeouts among them (a local file's OSError passes)
        log.warning("object storage: %s", bounded(str(error), 2000))
        raise StorageUnavailable(f"object storage does not answer ({type(error).__name__})") from None
