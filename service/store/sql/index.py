"""The index as SQL tables, one set of queries for SQLite and PostgreSQL.

Owns `SqlIndex`, the store's one index (what changes: the records, which
tenant holds which model, the bytes each takes and in all, the order of
last use, the marks of content in flight, each holding's check runs, the
secrets every replica shares (`shared_secret`); the resumable uploads' rows,
`upload_rows`: `service.store.sql.upload_rows`; the MLflow gate's delivery
markers and claims, `registry_rows`: `service.store.sql.registry_rows`),
over an `SqlDatabase` (`service.store.sql.database`: SQLite, a file in a
folder store, `service.store.sqlite`; or PostgreSQL, a fleet's,
`service.store.postgres`), whose schema `open` brings up to date
(`service.store.sql.schema`). The byte total and the model count are one
row a trigger keeps; the marks of content in flight are aged by the
dialect's clock (`service.store.sql.dialect`); last use is this process's
`time.time_ns()`. `locked()` is the database's index lock: every change of
the records and holdings holds it, across every process.

A tenant is kept under `tenant_key` (a hash, never its name). Model ids are
content hashes (`MODEL_ID`): any other id is not stored (read as absent,
refused with KeyError as a write).
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import time
from contextlib import AbstractContextManager
from pathlib import Path

from service.store.eviction import TenantCaps
from service.store.files import MODEL_ID
from service.store.memo import Memo
from service.store.records import StoredRecord, TenantRecord
from service.store.sql.database import INDEX_LOCK, SqlDatabase
from service.store.sql.registry_rows import RegistryRows
from service.store.sql.schema import migrate
from service.store.sql.upload_rows import UploadRows

RECORDS_CACHED = 4096  # parsed records kept, by their text (each a few hundred bytes)
EVICTABLE_PAGE = 64  # models an eviction reads at a time, in order of last use

# The stored models least recently used first (onnx_models_by_last_use), a page
# at a time after the last one read: an eviction reads about as many rows as it passes.
EVICTABLE = (
    "SELECT id, size, last_use_ns FROM onnx_models WHERE (last_use_ns, id) > (%s, %s) AND id <> %s ORDER BY last_use_ns, id LIMIT %s"
)
TOTAL_SIZE = "CAST(COALESCE(SUM(m.size), 0) AS BIGINT)"


@functools.lru_cache(maxsize=4096)
def tenant_key(tenant: str) -> str:
    """The first 32 hex digits of the SHA-256 of the tenant's name (the
    folder name of the file index before it, so keys carried over agree)."""
    return hashlib.sha256(tenant.encode()).hexdigest()[:32]


def _is_id(model_id: str) -> bool:
    return MODEL_ID.fullmatch(model_id) is not None


def _storable_id(model_id: str) -> str:
    if not _is_id(model_id):
        raise KeyError(model_id)
    return model_id


def _holding(record: object, label: object) -> TenantRecord:
    """A holding's record, from its JSON and its label's column."""
    held = TenantRecord.model_validate_json(str(record))
    held.label = str(label or "")
    return held


def _marks(count: int) -> str:
    return ", ".join(["%s"] * count)


class SqlIndex:
    migrations_applied = 0  # by this index's open(): 0 if the schema was current

    def __init__(self, database: SqlDatabase, folder: Path | None = None) -> None:
        """`folder`: the store's folder its migrations carry older layouts over from (a folder store's), else None."""
        self.database = database
        self.folder = folder
        self.records: Memo[str, StoredRecord] = Memo(RECORDS_CACHED)
        dialect = database.dialect
        self._mark_now = (
            f"INSERT INTO onnx_uploads (place, began) VALUES (%s, {dialect.now}) ON CONFLICT (place) DO UPDATE SET began = EXCLUDED.began"
        )
        self._mark_epoch = (
            f"INSERT INTO onnx_uploads (place, began) VALUES (%s, {dialect.epoch})"
            f" ON CONFLICT (place) DO UPDATE SET began = {dialect.epoch}"
        )
        self._live = f"SELECT place FROM onnx_uploads WHERE began > {dialect.seconds_ago}"
        self._stale = f"SELECT place FROM onnx_uploads WHERE began <= {dialect.seconds_ago}"
        self._open = f"SELECT 1 FROM onnx_uploads WHERE place = %s AND began > {dialect.epoch}"

    # --- the life cycle

    def open(self) -> None:
        """Connect, and migrate the schema (`migrations_applied`); StorageUnavailable if the database does not answer."""
        self.database.open()
        try:
            self.migrations_applied = migrate(self.database, self.folder)
        except BaseException:
            self.database.close()
            raise

    def close(self) -> None:
        self.database.close()

    def check(self) -> None:
        """StorageUnavailable, saying why, if the database does not answer now."""
        self.database.check()

    def locked(self) -> AbstractContextManager[None]:
        """Exclusive across every process that shares the database: every change of records and holdings happens under it."""
        return self.database.locked(INDEX_LOCK)

    def upload_rows(self, expiry: float, lease_seconds: float) -> UploadRows:
        """The resumable uploads' rows (`service.store.sql.upload_rows`), expiring `expiry` seconds after their last write."""
        return UploadRows(self.database, expiry, lease_seconds)

    def registry_rows(self) -> RegistryRows:
        """The MLflow gate's delivery markers and claims (`service.store.sql.registry_rows`)."""
        return RegistryRows(self.database)

    def _parsed(self, text: str) -> StoredRecord:
        """A record from its JSON, parsed once per text (do not change it: `replace_record` a copy)."""
        return self.records.get(text, lambda: StoredRecord.model_validate_json(text))

    # --- records, sizes, last use

    def has(self, model_id: str) -> bool:
        return _is_id(model_id) and self.database.one("SELECT 1 FROM onnx_models WHERE id = %s", (model_id,)) is not None

    def record(self, model_id: str) -> StoredRecord | None:
        row = self.database.one("SELECT record FROM onnx_models WHERE id = %s", (model_id,)) if _is_id(model_id) else None
        return None if row is None else self._parsed(str(row[0]))

    def add_record(self, record: StoredRecord, size: int) -> None:
        self.database.change(
            "INSERT INTO onnx_models (id, record, size, last_use_ns, place) VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record, size = EXCLUDED.size,"
            " last_use_ns = EXCLUDED.last_use_ns, place = EXCLUDED.place",
            (_storable_id(record.id), record.model_dump_json(), size, time.time_ns(), record.place),
        )

    def replace_record(self, record: StoredRecord) -> None:
        query = "UPDATE onnx_models SET record = %s, place = %s WHERE id = %s"
        self.database.change(query, (record.model_dump_json(), record.place, record.id))

    def drop(self, model_id: str, size: int) -> None:
        """The record and every holding (lock held: one transaction); the total
        is kept by a trigger, so `size` is not needed."""
        if _is_id(model_id):
            self.database.change("DELETE FROM onnx_holdings WHERE model_id = %s", (model_id,))
            self.database.change("DELETE FROM onnx_models WHERE id = %s", (model_id,))

    def size(self, model_id: str) -> int:
        row = self.database.one("SELECT size FROM onnx_models WHERE id = %s", (model_id,)) if _is_id(model_id) else None
        return 0 if row is None else int(row[0])

    def grow(self, model_id: str, added: int) -> None:
        if _is_id(model_id):
            self.database.change("UPDATE onnx_models SET size = size + %s WHERE id = %s", (added, model_id))

    def usage(self) -> int:
        row = self.database.one("SELECT bytes FROM onnx_totals")
        return 0 if row is None else int(row[0])

    def count(self) -> int:
        row = self.database.one("SELECT models FROM onnx_totals")
        return 0 if row is None else int(row[0])

    def touch(self, model_id: str) -> None:
        if _is_id(model_id):
            query = "UPDATE onnx_models SET last_use_ns = %s WHERE id = %s"
            self.database.change(query, (time.time_ns(), model_id), durable=False)

    def by_last_use(self) -> list[str]:
        return [str(row[0]) for row in self.database.rows("SELECT id FROM onnx_models ORDER BY last_use_ns, id")]

    def places(self) -> set[str]:
        return {str(row[0]) for row in self.database.rows("SELECT DISTINCT COALESCE(NULLIF(place, ''), id) FROM onnx_models")}

    def evictable(self, tenant: str, caps: TenantCaps, *, keep: str, wanted: int) -> list[tuple[str, int]]:
        """A page of models in order of last use at a time, with the other
        tenants that hold them; with caps, one count per page of the other
        holders it meets first (whether each is past its caps), never of
        every tenant."""
        if wanted <= 0:
            return []
        own = tenant_key(tenant)
        over: dict[str, bool] = {}
        found, freed = [], 0
        after: tuple[int, str] = (-(2**63), "")
        while True:
            page = self.database.rows(EVICTABLE, (after[0], after[1], keep, EVICTABLE_PAGE))
            others = self._other_holders([str(row[0]) for row in page], own)
            if caps.any:
                met = sorted({key for keys in others.values() for key in keys} - over.keys())
                over.update(self._past_caps(met, caps))
            for model_id, size, last_use_ns in page:
                after = (int(last_use_ns), str(model_id))
                if all(over.get(key, False) for key in others.get(str(model_id), ())):
                    found.append((str(model_id), int(size)))
                    freed += int(size)
                    if freed >= wanted:
                        return found
            if len(page) < EVICTABLE_PAGE:
                return found

    def _other_holders(self, model_ids: list[str], own: str) -> dict[str, list[str]]:
        """Model id -> the keys of the tenants other than `own` that hold it."""
        if not model_ids:
            return {}
        query = f"SELECT model_id, tenant_key FROM onnx_holdings WHERE tenant_key <> %s AND model_id IN ({_marks(len(model_ids))})"
        others: dict[str, list[str]] = {}
        for model_id, key in self.database.rows(query, (own, *model_ids)):
            others.setdefault(str(model_id), []).append(str(key))
        return others

    def _past_caps(self, keys: list[str], caps: TenantCaps) -> dict[str, bool]:
        """Whether each tenant (by key) is past one of `caps`, every holding counted (`service.store.eviction`)."""
        past = dict.fromkeys(keys, False)
        if keys:
            query = (
                f"SELECT h.tenant_key, {TOTAL_SIZE}, count(*) FROM onnx_holdings h LEFT JOIN onnx_models m ON m.id = h.model_id"
                f" WHERE h.tenant_key IN ({_marks(len(keys))}) GROUP BY h.tenant_key"
            )
            for key, used, models in self.database.rows(query, keys):
                past[str(key)] = caps.passed(int(used), int(models))
        return past

    def tenant_usage(self, tenant: str) -> tuple[int, int]:
        row = self.database.one(
            f"SELECT {TOTAL_SIZE}, count(*) FROM onnx_holdings h JOIN onnx_models m ON m.id = h.model_id WHERE h.tenant_key = %s",
            (tenant_key(tenant),),
        )
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    # --- content in flight

    def begin_upload(self, place: str) -> None:
        self.database.change(self._mark_now, (place,))

    def end_upload(self, place: str) -> None:
        self.database.change("DELETE FROM onnx_uploads WHERE place = %s", (place,))

    def live_uploads(self, grace_seconds: float) -> set[str]:
        return {str(row[0]) for row in self.database.rows(self._live, (float(grace_seconds),))}

    def stale_uploads(self, grace_seconds: float) -> set[str]:
        return {str(row[0]) for row in self.database.rows(self._stale, (float(grace_seconds),))}

    def claim_upload(self, place: str) -> None:
        """The mark's time set to the epoch: stale for any grace, and no commit's any more."""
        self.database.change(self._mark_epoch, (place,))

    def upload_open(self, place: str) -> bool:
        return self.database.one(self._open, (place,)) is not None

    # --- tenants

    def tenant_key(self, tenant: str) -> str:
        return tenant_key(tenant)

    def hold(self, owner: TenantRecord, model_id: str) -> bool:
        added = self.database.change(
            "INSERT INTO onnx_holdings (tenant_key, model_id, holding, created_ns, label) VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT DO NOTHING",
            (tenant_key(owner.tenant), _storable_id(model_id), owner.model_dump_json(), owner.created_ns, owner.label),
        )
        return added == 1

    def holding(self, tenant: str, model_id: str) -> TenantRecord | None:
        if not _is_id(model_id):
            return None
        query = "SELECT holding, label FROM onnx_holdings WHERE tenant_key = %s AND model_id = %s"
        row = self.database.one(query, (tenant_key(tenant), model_id))
        return None if row is None else _holding(row[0], row[1])

    def rename(self, tenant: str, model_id: str, name: str | None, label: str | None) -> bool:
        """The tenant's holding takes `name` (its record's `input`) and `label`, each
        where not None (lock held: read, then written); False if it holds no such model."""
        held = self.holding(tenant, model_id)
        if held is None:
            return False
        renamed = held.model_copy(update={key: value for key, value in (("input", name), ("label", label)) if value is not None})
        query = "UPDATE onnx_holdings SET holding = %s, label = %s WHERE tenant_key = %s AND model_id = %s"
        return self.database.change(query, (renamed.model_dump_json(), renamed.label, tenant_key(tenant), model_id)) == 1

    def visible(self, tenant: str, model_id: str) -> bool:
        query = "SELECT 1 FROM onnx_holdings h JOIN onnx_models m ON m.id = h.model_id WHERE h.tenant_key = %s AND h.model_id = %s"
        return _is_id(model_id) and self.database.one(query, (tenant_key(tenant), model_id)) is not None

    def visible_record(self, tenant: str, model_id: str) -> StoredRecord | None:
        query = "SELECT m.record FROM onnx_holdings h JOIN onnx_models m ON m.id = h.model_id WHERE h.tenant_key = %s AND h.model_id = %s"
        row = self.database.one(query, (tenant_key(tenant), model_id)) if _is_id(model_id) else None
        return None if row is None else self._parsed(str(row[0]))

    def holds(self, tenant: str, model_id: str) -> bool:
        query = "SELECT 1 FROM onnx_holdings WHERE tenant_key = %s AND model_id = %s"
        return _is_id(model_id) and self.database.one(query, (tenant_key(tenant), model_id)) is not None

    def let_go(self, tenant: str, model_id: str) -> bool:
        """The holding goes, and its graph mark, check runs and attestation with it (one row)."""
        if not _is_id(model_id):
            return False
        query = "DELETE FROM onnx_holdings WHERE tenant_key = %s AND model_id = %s"
        return self.database.change(query, (tenant_key(tenant), model_id)) == 1

    def held_by_anyone(self, model_id: str) -> bool:
        return _is_id(model_id) and self.database.one("SELECT 1 FROM onnx_holdings WHERE model_id = %s LIMIT 1", (model_id,)) is not None

    def held_by(self, tenant: str) -> list[str]:
        rows = self.database.rows("SELECT model_id FROM onnx_holdings WHERE tenant_key = %s", (tenant_key(tenant),))
        return [str(row[0]) for row in rows]

    def newest(self, tenant: str, before: tuple[int, str] | None, limit: int) -> list[tuple[int, str]]:
        key, limit = tenant_key(tenant), max(0, limit)
        if before is None:
            rows = self.database.rows(
                "SELECT created_ns, model_id FROM onnx_holdings WHERE tenant_key = %s ORDER BY created_ns DESC, model_id DESC LIMIT %s",
                (key, limit),
            )
        elif "\0" in before[1]:
            return []  # no id a listing handed out: a forged cursor
        else:
            rows = self.database.rows(
                "SELECT created_ns, model_id FROM onnx_holdings WHERE tenant_key = %s AND (created_ns, model_id) < (%s, %s)"
                " ORDER BY created_ns DESC, model_id DESC LIMIT %s",
                (key, before[0], before[1], limit),
            )
        return [(int(created_ns), str(model_id)) for created_ns, model_id in rows]

    def listing(
        self, tenant: str, before: tuple[int, str] | None, limit: int
    ) -> list[tuple[int, str, StoredRecord, TenantRecord, bytes | None]]:
        """(when the tenant took it, in ns; id; its record; the tenant's record; its check runs) of up
        to `limit` of the tenant's stored models, newest first, older than `before`: one query."""
        key, limit = tenant_key(tenant), max(0, limit)
        select = (
            "SELECT h.created_ns, h.model_id, m.record, h.holding, h.label, h.checks"
            " FROM onnx_holdings h JOIN onnx_models m ON m.id = h.model_id"
        )
        order = "ORDER BY h.created_ns DESC, h.model_id DESC LIMIT %s"
        if before is None:
            rows = self.database.rows(f"{select} WHERE h.tenant_key = %s {order}", (key, limit))
        elif "\0" in before[1]:
            return []  # no id a listing handed out: a forged cursor
        else:
            query = f"{select} WHERE h.tenant_key = %s AND (h.created_ns, h.model_id) < (%s, %s) {order}"
            rows = self.database.rows(query, (key, before[0], before[1], limit))
        return [
            (
                int(created_ns),
                str(model_id),
                self._parsed(str(record)),
                _holding(holding, label),
                str(checks).encode() if checks else None,
            )
            for created_ns, model_id, record, holding, label, checks in rows
        ]

    def graph_rendered(self, tenant: str, model_id: str) -> bool:
        if not _is_id(model_id):
            return False
        query = "SELECT graph_rendered FROM onnx_holdings WHERE tenant_key = %s AND model_id = %s"
        row = self.database.one(query, (tenant_key(tenant), model_id))
        return row is not None and bool(row[0])

    def mark_graph_rendered(self, tenant: str, model_id: str) -> None:
        if _is_id(model_id):
            query = "UPDATE onnx_holdings SET graph_rendered = true WHERE tenant_key = %s AND model_id = %s"
            self.database.change(query, (tenant_key(tenant), model_id))

    def checks(self, tenant: str, model_id: str) -> bytes | None:
        if not _is_id(model_id):
            return None
        query = "SELECT checks FROM onnx_holdings WHERE tenant_key = %s AND model_id = %s"
        row = self.database.one(query, (tenant_key(tenant), model_id))
        return None if row is None or not row[0] else str(row[0]).encode()

    def keep_checks(self, tenant: str, model_id: str, document: bytes) -> bool:
        if not _is_id(model_id):
            return False
        query = "UPDATE onnx_holdings SET checks = %s WHERE tenant_key = %s AND model_id = %s"
        return self.database.change(query, (document.decode(), tenant_key(tenant), model_id)) == 1

    def attestation(self, tenant: str, model_id: str) -> bytes | None:
        if not _is_id(model_id):
            return None
        query = "SELECT attestation FROM onnx_holdings WHERE tenant_key = %s AND model_id = %s"
        row = self.database.one(query, (tenant_key(tenant), model_id))
        return None if row is None or not row[0] else str(row[0]).encode()

    def keep_attestation(self, tenant: str, model_id: str, bundle: bytes) -> bool:
        if not _is_id(model_id):
            return False
        query = "UPDATE onnx_holdings SET attestation = %s WHERE tenant_key = %s AND model_id = %s"
        return self.database.change(query, (bundle.decode(), tenant_key(tenant), model_id)) == 1

    # --- secrets every process and replica shares

    def shared_secret(self, name: str) -> str:
        """The secret `name` (64 random hex digits), made here when the index has
        none yet: of processes or replicas making it at once, the first insert is
        kept (the others' do nothing) and every one reads that one."""
        insert = "INSERT INTO onnx_secrets (name, value) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING"
        self.database.change(insert, (name, secrets.token_hex(32)))
        row = self.database.one("SELECT value FROM onnx_secrets WHERE name = %s", (name,))
        assert row is not None, "a secret inserted, then not found"
        return str(row[0])
