"""The local index's tables in SQLite, versioned: what each migration does,
and the one step that brings a database up to date.

Owns `MIGRATIONS` and `migrate`. The version is `PRAGMA user_version` (the
number of migrations applied); `migrate` runs them in one `BEGIN IMMEDIATE`
transaction, so of several processes opening the store at once the first
migrates and the others find it current. The tables are PostgreSQL's
(`service.store.postgres.schema` says what each column holds) in SQLite's
types: text, integer, and the marks' times as real seconds since the epoch
(`service.store.sql.dialect`). Migration 2 carries over the file index of
the releases before this one (`service.store.sqlite.file_index`), once.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path

from service.store.sqlite.file_index import carry_over_file_index

log = logging.getLogger("service.store")

TABLES = [
    """
    CREATE TABLE onnx_models (
        id TEXT PRIMARY KEY,
        record TEXT NOT NULL,
        size INTEGER NOT NULL,
        last_use_ns INTEGER NOT NULL,
        place TEXT NOT NULL DEFAULT ''
    )""",
    "CREATE INDEX onnx_models_by_last_use ON onnx_models (last_use_ns, id)",
    """
    CREATE TABLE onnx_holdings (
        tenant_key TEXT NOT NULL,
        model_id TEXT NOT NULL,
        holding TEXT NOT NULL,
        created_ns INTEGER NOT NULL,
        graph_rendered INTEGER NOT NULL DEFAULT 0,
        checks TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (tenant_key, model_id)
    )""",
    "CREATE INDEX onnx_holdings_newest ON onnx_holdings (tenant_key, created_ns DESC, model_id DESC)",
    "CREATE INDEX onnx_holdings_by_model ON onnx_holdings (model_id)",
    "CREATE TABLE onnx_uploads (place TEXT PRIMARY KEY, began REAL NOT NULL)",
    """
    CREATE TABLE onnx_totals (
        singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
        bytes INTEGER NOT NULL,
        models INTEGER NOT NULL
    )""",
    "INSERT INTO onnx_totals (singleton, bytes, models) VALUES (1, 0, 0)",
    """
    CREATE TRIGGER onnx_models_added AFTER INSERT ON onnx_models
    BEGIN UPDATE onnx_totals SET bytes = bytes + NEW.size, models = models + 1; END""",
    """
    CREATE TRIGGER onnx_models_dropped AFTER DELETE ON onnx_models
    BEGIN UPDATE onnx_totals SET bytes = bytes - OLD.size, models = models - 1; END""",
    """
    CREATE TRIGGER onnx_models_resized AFTER UPDATE OF size ON onnx_models
    BEGIN UPDATE onnx_totals SET bytes = bytes + NEW.size - OLD.size; END""",
]


def _create_tables(connection: sqlite3.Connection, store: Path) -> None:
    for statement in TABLES:
        connection.execute(statement)


MIGRATIONS: list[Callable[[sqlite3.Connection, Path], None]] = [
    _create_tables,  # 1: models, holdings, marks of content in flight, totals
    carry_over_file_index,  # 2: the records and holdings of a store written before the SQL index
]


def migrate(connection: sqlite3.Connection, store: Path) -> int:
    """Bring the database in the store's folder up to date (a connection in
    autocommit); the number of migrations this call applied."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        version = int(connection.execute("PRAGMA user_version").fetchone()[0])
        if version > len(MIGRATIONS):
            log.warning("the index's schema is at version %d, newer than this service's %d: used as it is", version, len(MIGRATIONS))
            connection.execute("ROLLBACK")
            return 0
        for step in MIGRATIONS[version:]:
            step(connection, store)
        connection.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    applied = len(MIGRATIONS) - version
    if applied:
        log.info("the index's schema migrated from version %d to %d", version, len(MIGRATIONS))
    return applied
