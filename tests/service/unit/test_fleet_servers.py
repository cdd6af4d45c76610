"""The fleet store's throwaway servers (tools/fleet_servers.py, the `fleet_servers`
fixture) do what its tests rely on: obstore reaches S3 from `environ` alone,
each database and store URL is a fresh one, and the fault controls take a
server down and bring it back with its data.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import obstore
import psycopg
import pytest
from obstore.exceptions import BaseError as ObstoreError
from obstore.store import S3Store

if TYPE_CHECKING:
    from fleet_servers import FleetServers


def s3_store(fleet: FleetServers, monkeypatch: pytest.MonkeyPatch, url: str) -> Any:
    """An S3Store for `url` configured by the environment alone; failing fast (no retries) when S3 is down.

    No `client_options`: given any, obstore ignores the environment's (AWS_ALLOW_HTTP), and refuses http://.
    """
    for name, value in fleet.environ.items():
        monkeypatch.setenv(name, value)
    return S3Store.from_url(url, retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=5)})


def test_obstore_puts_and_reads_ranges_from_the_environment(fleet_servers: FleetServers, monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(fleet_servers.environ) >= {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}
    url, other_url = fleet_servers.new_store_url(), fleet_servers.new_store_url()
    assert url != other_url and url.startswith(f"s3://{fleet_servers.bucket}/")
    store = s3_store(fleet_servers, monkeypatch, url)
    content = os.urandom(300_000)
    obstore.put(store, "models/m1/content", content)
    assert bytes(obstore.get_range(store, "models/m1/content", start=123_456, end=123_456 + 4096)) == content[123_456 : 123_456 + 4096]
    assert bytes(obstore.get(store, "models/m1/content").bytes()) == content
    other = s3_store(fleet_servers, monkeypatch, other_url)
    assert obstore.list(other).collect() == []  # a fresh prefix
    with pytest.raises(FileNotFoundError):
        obstore.get(other, "models/m1/content")


def test_new_databases_are_empty_distinct_and_writable(fleet_servers: FleetServers) -> None:
    first, second = fleet_servers.new_database(), fleet_servers.new_database()
    assert first != second
    assert urlsplit(first).hostname == "127.0.0.1" and urlsplit(first).scheme == "postgresql"
    with psycopg.connect(first) as db:
        db.execute("CREATE TABLE models (id text PRIMARY KEY, size bigint NOT NULL)")
        db.execute("INSERT INTO models VALUES ('m1', 42)")
    with psycopg.connect(first) as db:
        assert db.execute("SELECT id, size FROM models").fetchall() == [("m1", 42)]
    with psycopg.connect(second) as db:
        assert db.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)


def test_stop_postgres_breaks_connections_and_start_postgres_mends_them(fleet_servers: FleetServers) -> None:
    url = fleet_servers.new_database()
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("CREATE TABLE kept (n int)")
        db.execute("INSERT INTO kept VALUES (7)")
    opened = psycopg.connect(url, autocommit=True)
    try:
        fleet_servers.stop_postgres()
        with pytest.raises(psycopg.OperationalError):
            opened.execute("SELECT 1")  # the session open before the stop is gone
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(url, connect_timeout=2)
    finally:
        opened.close()
        fleet_servers.start_postgres()
    with psycopg.connect(url) as db:
        assert db.execute("SELECT n FROM kept").fetchall() == [(7,)]


def test_stop_s3_fails_requests_and_start_s3_serves_the_same_objects(fleet_servers: FleetServers, monkeypatch: pytest.MonkeyPatch) -> None:
    store = s3_store(fleet_servers, monkeypatch, fleet_servers.new_store_url())
    obstore.put(store, "content", b"kept across the outage")
    fleet_servers.stop_s3()
    try:
        with pytest.raises(ObstoreError):
            obstore.get(store, "content")
        with pytest.raises(ObstoreError):
            obstore.put(store, "other", b"x")
    finally:
        fleet_servers.start_s3()
    assert bytes(obstore.get_range(store, "content", start=0, end=4)) == b"kept"
    obstore.put(store, "other", b"written after the restart")
    assert sorted(entry["path"] for entry in obstore.list(store).collect()) == ["content", "other"]
