"""What a store's folder kept in files before the SQL index held it, carried over once.

Owns the two migrations that read a folder store's older layouts
(`service.store.sql.schema`, 6 and 7):

`carry_over_file_index`: before the SQL index, the local store kept its
index in files beside the content:

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

`carry_over_local_uploads`: before the uploads' rows, a folder store's
resumable uploads kept their state in files:

    uploads/<T>/<id>/upload.json  the declared length, the Upload-Metadata as
                                  sent, its filename, when it was created
    uploads/<T>/<id>/data         the bytes received: its size the offset,
                                  its mtime the last write

Each becomes a row (`service.store.sql.upload_rows`) with the same tenant,
length, metadata and last write; its `data` stays where it is, the bytes
the upload goes on appending to in place (`service.store.uploads`). One
whose record cannot be read is left out (then removed as garbage).
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

from pydantic import ValidationError

from service.store.files import MODEL_ID
from service.store.layout import ModelFolder
from service.store.records import StoredRecord, TenantRecord
from service.store.sql.database import Migrating

log = logging.getLogger("service.store")

UPLOAD_RECORD = "upload.json"  # the releases before the uploads' rows
UPLOAD_BYTES = "data"
UPLOAD_ID = re.compile(r"[0-9a-f]{32}")


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


def carry_over_file_index(migrating: Migrating, store: Path) -> None:
    models = _models(store)
    migrating.executemany("INSERT INTO onnx_models (id, record, size, last_use_ns, place) VALUES (%s, %s, %s, %s, %s)", models)
    holdings = _holdings(store, {row[0] for row in models})
    migrating.executemany(
        "INSERT INTO onnx_holdings (tenant_key, model_id, holding, created_ns, graph_rendered, checks) VALUES (%s, %s, %s, %s, %s, %s)",
        holdings,
    )
    if models or holdings:
        log.info("the file index carried over: %d models, %d holdings", len(models), len(holdings))


def _upload(folder: Path) -> tuple[int, str, str, int, float] | None:
    """(length, metadata, filename, created_ns, last write) of an upload folder of the releases before; None if unreadable."""
    try:
        record = json.loads((folder / UPLOAD_RECORD).read_bytes())
        last_write = os.stat(folder / UPLOAD_BYTES).st_mtime
        return int(record["length"]), str(record["metadata"]), str(record["filename"]), int(record["created_ns"]), last_write
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("a resumable upload of the release before cannot be read, left out (%s): %s", folder.name, error)
        return None


def carry_over_local_uploads(migrating: Migrating, store: Path) -> None:
    dialect = migrating.dialect
    insert = (
        "INSERT INTO onnx_resumable_uploads (id, tenant_key, length, metadata, filename, created_ns, last_write, lease_until)"
        f" VALUES (%s, %s, %s, %s, %s, %s, {dialect.from_unix}, {dialect.epoch})"
    )
    uploads = store / "uploads"
    carried = []
    for tenant in sorted(os.scandir(uploads), key=lambda entry: entry.name) if uploads.is_dir() else []:
        if not tenant.is_dir() or tenant.name.startswith("."):
            continue
        for entry in sorted(os.scandir(tenant.path), key=lambda entry: entry.name):
            if not UPLOAD_ID.fullmatch(entry.name) or not entry.is_dir() or not (Path(entry.path) / UPLOAD_RECORD).is_file():
                continue
            found = _upload(Path(entry.path))
            if found is not None:
                carried.append((entry.name, tenant.name, *found))
    migrating.executemany(insert, carried)
    if carried:
        log.info("the resumable uploads of the release before carried over: %d", len(carried))
