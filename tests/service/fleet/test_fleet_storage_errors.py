"""Storage errors say what is wrong, against a real SeaweedFS and PostgreSQL.

A bucket that does not exist, an access key the object storage refuses, an
endpoint where nothing listens, a password PostgreSQL refuses: each is a
`StorageUnavailable` whose detail (what a client may be told) says what is
wrong in kind, naming no bucket, endpoint or key, and whose operator text
(`/readyz`, the log) names them. A missing bucket is made with
`--create-bucket`; without it a replica stays up, not ready, `/readyz`
naming the bucket, and serves once the bucket exists.
"""

from __future__ import annotations

import secrets
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import pytest
from support.service_harness import SAMPLES, ServiceProcess, assert_problem
from support.small_models import weight_model
from test_fleet_replicas import HOOKS, upload

from service.errors import StorageUnavailable
from service.store.postgres.postgres_index import PostgresIndex
from service.store.s3.bucket_blobs import BucketBlobs
from service.store.s3.local_cache import LocalCache
from service.store.s3.objects import Place, create_bucket

if TYPE_CHECKING:
    from fleet_servers import FleetServers  # tools/ (tests/support/fleet.py's fixture)

READY_WITHIN_SECONDS = 30.0


def blobs(tmp_path: Path, bucket: str, *, create: bool = False) -> BucketBlobs:
    return BucketBlobs(bucket, "prefix", LocalCache(tmp_path / f"cache-{secrets.token_hex(4)}", 1 << 20), create_bucket=create)


def opening_error(store: BucketBlobs) -> StorageUnavailable:
    with pytest.raises(StorageUnavailable) as refused:
        store.open()
    return refused.value


def test_a_missing_bucket_is_named_and_made_with_create_bucket(
    tmp_path: Path, fleet_servers: FleetServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in fleet_servers.environ.items():
        monkeypatch.setenv(name, value)
    bucket = f"missing-{secrets.token_hex(4)}"
    error = opening_error(blobs(tmp_path, bucket))
    assert f"no bucket {bucket!r}" in error.operator and fleet_servers.environ["AWS_ENDPOINT_URL"] in error.operator
    assert "--create-bucket" in error.operator
    assert bucket not in error.detail and "127.0.0.1" not in error.detail and "does not exist" not in error.detail
    made = blobs(tmp_path, bucket, create=True)
    made.open()  # made, then asked again
    part = tmp_path / "part"
    part.write_bytes(b"bytes")
    made.put("uploads/x/part-000001", part)
    again = blobs(tmp_path, bucket)
    again.open()  # no creation asked: it is there now
    assert again.keys("uploads/") == ["uploads/x/part-000001"]
    create_bucket(Place.of(bucket))  # a second creation (another replica's at the same moment) is no error


def test_refused_credentials_name_the_access_key(tmp_path: Path, fleet_servers: FleetServers, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in fleet_servers.environ.items():
        monkeypatch.setenv(name, value)
    bucket = urlsplit(fleet_servers.new_store_url()).netloc
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not the secret")
    error = opening_error(blobs(tmp_path, bucket))
    key_id = fleet_servers.environ["AWS_ACCESS_KEY_ID"]
    assert f"refuses key {key_id!r}: access denied" in error.operator and bucket in error.operator
    assert "not the secret" not in error.operator
    assert error.detail == "object storage refuses the service's credentials (access denied)"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDNOBODYKNOWS")
    assert "refuses key 'AKIDNOBODYKNOWS': access denied (InvalidAccessKeyId)" in opening_error(blobs(tmp_path, bucket)).operator


def test_an_endpoint_where_nothing_listens_is_connection_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens there once closed
    for name, value in {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}.items():
        monkeypatch.setenv(name, value)
    error = opening_error(blobs(tmp_path, "bucket"))
    assert error.detail == "object storage does not answer (connection refused)"
    assert f"connection refused (http://127.0.0.1:{port}, bucket 'bucket')" in error.operator


def test_a_refused_database_password_names_the_database_and_user(fleet_servers: FleetServers) -> None:
    url = urlsplit(fleet_servers.new_database())
    wrong = urlunsplit(url._replace(netloc=f"{url.username}:wrong@{url.hostname}:{url.port}"))
    index = PostgresIndex(wrong, timeout=1.0)
    with pytest.raises(StorageUnavailable) as refused:
        index.open()
    operator = refused.value.operator
    assert f"{url.hostname}:{url.port}, database {url.path.lstrip('/')}, user {url.username}" in operator
    assert "password authentication failed" in operator and "wrong" not in operator.replace("password authentication", "")
    assert refused.value.detail.startswith("the index's database does not answer")
    index.close()


def test_a_replica_without_its_bucket_names_it_in_readyz_and_serves_once_it_exists(fleet_servers: FleetServers, tmp_path: Path) -> None:
    bucket = f"late-{secrets.token_hex(4)}"
    arguments = ("--store", f"s3://{bucket}/models", "--database", fleet_servers.new_database(), "--cache-dir", str(tmp_path))
    replica = ServiceProcess(tmp_path, SAMPLES, *arguments, "--workers", "1", env={**fleet_servers.environ, **HOOKS})
    try:
        replica.start(wait_for="/healthz")
        with replica.client() as client:
            detail = assert_problem(client.get("/readyz"), 503, "not-ready")["detail"]
            assert f"no bucket {bucket!r}" in detail and "--create-bucket" in detail
            refused = upload(replica, weight_model(seed=41), "early.onnx")
            assert_problem(refused, 503, "storage-unavailable")
            assert bucket not in refused.json()["detail"]
            create_bucket(Place.of(bucket, fleet_servers.environ), fleet_servers.environ)  # the operator makes it
            deadline = time.monotonic() + READY_WITHIN_SECONDS
            while client.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline, client.get("/readyz").text
                time.sleep(0.5)
            assert upload(replica, weight_model(seed=41), "early.onnx").status_code == 201
    finally:
        replica.stop()


def test_a_replica_with_create_bucket_makes_it(fleet_servers: FleetServers, tmp_path: Path) -> None:
    bucket = f"made-{secrets.token_hex(4)}"
    arguments = ("--store", f"s3://{bucket}/models", "--database", fleet_servers.new_database(), "--cache-dir", str(tmp_path))
    replica = ServiceProcess(tmp_path, SAMPLES, *arguments, "--workers", "1", "--create-bucket", env={**fleet_servers.environ, **HOOKS})
    try:
        replica.start()
        with replica.client() as client:
            deadline = time.monotonic() + READY_WITHIN_SECONDS
            while client.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline, client.get("/readyz").text
                time.sleep(0.5)
        assert upload(replica, weight_model(seed=42), "made.onnx").status_code == 201
    finally:
        replica.stop()
