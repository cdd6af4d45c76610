"""The file index of the releases before the SQL index, carried over once.

Owns `carry_over_file_index`, the SQLite schema's second migration. Before
it, the local store kept its index in files beside the content:

    models/<id>/record.json   the model's record (`StoredRecord`)
    models/<id>/lru           its text the bytes the model takes, its mtime the last use
    tenants/<T>/<id>.json     tenant T (a key: `service.store.sql.index.tenant_key`)
                              holds the model (`TenantRecord`); its mtime
                              ordered the tenant's listing
    tenants/<T>/<id>.graph    the graph was rendered for T once
    tenants/<T>/<id>.checks   T's check runs of the model (`CheckRuns`, as JSON)

Each recorded model and each holding of one becomes a row, with the same
size, last use, listing order, marks and runs. A record that cannot be
read is left out with a warning (the old index could not serve it either:
its content is then garbage the start collects); the files stay where they
are, unread from then on.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

from pydantic import ValidationError

from service.store.files import MODEL_ID
from service.store.layout import ModelFolder
from service.store.records import StoredRecord, TenantRecord

log = logging.getLogger("service.store")


def _models(store: Path) -> list[tuple[str, str, int, int, str]]:
    """(id, record as JSON, size, last use in ns, place) of every readable record."""
    found = []
    models = store / "models"
    for entry in sorted(os.scandir(models), key=lambda entry: entry.name) if models.is_dir() else []:
        if not MODEL_ID.fullmatch(entry.name) or not entry.is_dir():
            continue
        folder = ModelFolder(Path(entry.path))
        try:
            record = StoredRecord.model_validate_json(folder.record.read_bytes())
        except FileNotFoundError:
            continue  # content no record names: garbage, as before
        except (OSError, ValidationError) as error:
            log.warning("the stored record of %s cannot be read, left out of the index: %s", entry.name, error)
            continue
        try:
            size, last_use = int(folder.lru.read_text()), folder.lru.stat().st_mtime_ns
        except (OSError, ValueError):
            size, last_use = 0, 0
        found.append((entry.name, record.model_dump_json(), size, last_use, record.place))
    return found


def _holdings(store: Path, recorded: set[str]) -> list[tuple[str, str, str, int, bool, str]]:
    """(tenant key, model id, holding as JSON, listing time, graph rendered, checks) of each holding of a recorded model."""
    found = []
    tenants = store / "tenants"
    for folder in sorted(os.scandir(tenants), key=lambda entry: entry.name) if tenants.is_dir() else []:
        if not folder.is_dir():
            continue
        for entry in sorted(os.scandir(folder.path), key=lambda entry: entry.name):
            model_id = entry.name.removesuffix(".json")
            if not entry.name.endswith(".json") or model_id not in recorded:
                continue
            base = Path(entry.path).with_suffix("")
            try:
                holding = TenantRecord.model_validate_json(Path(entry.path).read_bytes())
                listed = entry.stat().st_mtime_ns
                checks = base.with_suffix(".checks").read_text() if base.with_suffix(".checks").is_file() else ""
            except (OSError, ValidationError) as error:
                log.warning("a holding of %s cannot be read, left out of the index: %s", model_id, error)
                continue
            found.append((folder.name, model_id, holding.model_dump_json(), listed, base.with_suffix(".graph").is_file(), checks))
    return found


def carry_over_file_index(connection: sqlite3.Connection, store: Path) -> None:
    models = _models(store)
    connection.executemany("INSERT INTO onnx_models (id, record, size, last_use_ns, place) VALUES (?, ?, ?, ?, ?)", models)
    holdings = _holdings(store, {row[0] for row in models})
    connection.executemany(
        "INSERT INTO onnx_holdings (tenant_key, model_id, holding, created_ns, graph_rendered, checks) VALUES (?, ?, ?, ?, ?, ?)", holdings
    )
    if models or holdings:
        log.info("the file index carried over: %d models, %d holdings", len(models), len(holdings))
