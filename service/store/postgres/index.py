"""The index in one PostgreSQL database, shared by every replica given its URL.

Owns `PostgresIndex` (`service.store.interface.Index`) over the tables of
`service.store.postgres.schema` and the connections of
`service.store.postgres.database`: `locked()` is a transaction holding the
index's advisory lock, so changes are serialized across every process on
every machine, and each index call a thread makes inside it runs in that
transaction; calls outside it are one statement each in autocommit (reads,
`touch`, the uploads' marks). The byte total is a sum in the database, exact
however many replicas write; times of uploads are the database's clock, the
one every replica shares; last use is the replica's `time.time_ns()`.

A tenant is kept under `tenant_key` (a hash, never its name). Model ids are
content hashes (`MODEL_ID`): any other id is not stored (read as absent,
refused with KeyError as a write), as in the local index.
"""

from __future__ import annotations

import hashlib
import time
from contextlib import AbstractContextManager

from service.store.eviction import TenantCaps
from service.store.files import MODEL_ID
from service.store.postgres.database import Database
from service.store.postgres.schema import INDEX_LOCK, migrate
from service.store.records import StoredRecord, TenantRecord

# The stored models least recently used first (onnx_models_by_last_use), each
# with the other tenants that hold it (onnx_holdings_by_model), a page at a
# time after the last one read (`PostgresIndex.evictable`): an eviction reads
# about as many rows as it passes, never the table.
EVICTABLE = """
SELECT m.id, m.size, m.last_use_ns,
    ARRAY(SELECT h.tenant_key FROM onnx_holdings h WHERE h.model_id = m.id AND h.tenant_key <> %(own)s)
FROM onnx_models m WHERE (m.last_use_ns, m.id) > (%(after_ns)s, %(after_id)s) AND m.id <> %(keep)s
ORDER BY m.last_use_ns, m.id LIMIT %(page)s
"""
EVICTABLE_PAGE = 64
# The bytes and models of some holders, every holding counted (`service.store.eviction`).
HOLDERS_USAGE = """
SELECT h.tenant_key, COALESCE(SUM(m.size), 0)::bigint, count(*)
FROM onnx_holdings h LEFT JOIN onnx_models m ON m.id = h.model_id
WHERE h.tenant_key = ANY(%s) GROUP BY h.tenant_key
"""


def tenant_key(tenant: str) -> str:
    """The first 32 hex digits of the SHA-256 of the tenant's name: the local
    index's derivation (`TenantFolders.folder`), so keys agree across backends."""
    return hashlib.sha256(tenant.encode()).hexdigest()[:32]


def _is_id(model_id: str) -> bool:
    return MODEL_ID.fullmatch(model_id) is not None


def _storable_id(model_id: str) -> str:
    if not _is_id(model_id):
        raise KeyError(model_id)
    return model_id


class PostgresIndex:
    def __init__(self, url: str, *, pool_size: int = 8, timeout: float = 3.0) -> None:
        """`url`: libpq's (the password may come from PGPASSWORD or PGPASSFILE);
        `timeout`: seconds to wait for a connection, and for open()."""
        self.database = Database(url, pool_size=pool_size, timeout=timeout)
        self.migrations_applied = 0  # by this index's open(): 0 if another replica had migrated

    # --- life cycle

    def open(self) -> None:
        """Connect (StorageUnavailable after `timeout` seconds) and migrate the schema."""
        self.database.open()
        try:
            with self.database.connection() as connection:
                self.migrations_applied = migrate(connection)
        except BaseException:
            self.database.close()
            raise

    def close(self) -> None:
        self.database.close()

    def check(self) -> None:
        self.database.one("SELECT 1")

    def locked(self) -> AbstractContextManager[None]:
        return self.database.locked(INDEX_LOCK)

    # --- records, sizes, last use

    def has(self, model_id: str) -> bool:
        return _is_id(model_id) and self.database.one("SELECT 1 FROM onnx_models WHERE id = %s", (model_id,)) is not None

    def record(self, model_id: str) -> StoredRecord | None:
        row = self.database.one("SELECT record FROM onnx_models WHERE id = %s", (model_id,)) if _is_id(model_id) else None
        return None if row is None else StoredRecord.model_validate_json(row[0])

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
        """The record and every holding (graph marks with them), in one
        statement; the total is a sum, so `size` is not needed."""
        if not _is_id(model_id):
            return
        self.database.change(
            "WITH holdings AS (DELETE FROM onnx_holdings WHERE model_id = %s) DELETE FROM onnx_models WHERE id = %s",
            (model_id, model_id),
        )

    def size(self, model_id: str) -> int:
        row = self.database.one("SELECT size FROM onnx_models WHERE id = %s", (model_id,)) if _is_id(model_id) else None
        return 0 if row is None else int(row[0])

    def grow(self, model_id: str, added: int) -> None:
        if _is_id(model_id):
            self.database.change("UPDATE onnx_models SET size = size + %s WHERE id = %s", (added, model_id))

    def usage(self) -> int:
        row = self.database.one("SELECT bytes FROM onnx_totals")  # kept by a trigger (schema.py's migration 4)
        return 0 if row is None else int(row[0])

    def count(self) -> int:
        row = self.database.one("SELECT models FROM onnx_totals")
        return 0 if row is None else int(row[0])

    def touch(self, model_id: str) -> None:
        if _is_id(model_id):
            self.database.change("UPDATE onnx_models SET last_use_ns = %s WHERE id = %s", (time.time_ns(), model_id))

    def by_last_use(self) -> list[str]:
        return [str(row[0]) for row in self.database.rows("SELECT id FROM onnx_models ORDER BY last_use_ns, id")]

    def places(self) -> set[str]:
        return {str(row[0]) for row in self.database.rows("SELECT DISTINCT COALESCE(NULLIF(place, ''), id) FROM onnx_models")}

    def evictable(self, tenant: str, caps: TenantCaps, *, keep: str, wanted: int) -> list[tuple[str, int]]:
        """A page of models in order of last use at a time; with caps, one count
        per page of the other holders it meets first (whether each is past
        its caps), never of every tenant."""
        if wanted <= 0:
            return []
        over: dict[str, bool] = {}
        found, freed = [], 0
        after: tuple[int, str] = (-(2**63), "")
        while True:
            parameters = {"own": tenant_key(tenant), "keep": keep, "after_ns": after[0], "after_id": after[1], "page": EVICTABLE_PAGE}
            page = self.database.rows(EVICTABLE, parameters)  # type: ignore[arg-type]  # psycopg takes a mapping too
            if caps.any:
                met = list({str(key) for *_, others in page for key in others} - over.keys())
                over.update((key, False) for key in met)
                for key, used, models in self.database.rows(HOLDERS_USAGE, (met,)) if met else []:
                    over[str(key)] = caps.passed(int(used), int(models))
            for model_id, size, last_use_ns, others in page:
                after = (int(last_use_ns), str(model_id))
                if all(over.get(str(key), False) for key in others):
                    found.append((str(model_id), int(size)))
                    freed += int(size)
                    if freed >= wanted:
                        return found
            if len(page) < EVICTABLE_PAGE:
                return found

    def tenant_usage(self, tenant: str) -> tuple[int, int]:
        row = self.database.one(
            "SELECT COALESCE(SUM(m.size), 0)::bigint, count(*) FROM onnx_holdings h JOIN onnx_models m ON m.id = h.model_id"
            " WHERE h.tenant_key = %s",
            (tenant_key(tenant),),
        )
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    # --- commits in flight

    def begin_upload(self, place: str) -> None:
        self.database.change(
            "INSERT INTO onnx_uploads (place, began) VALUES (%s, clock_timestamp())"
            " ON CONFLICT (place) DO UPDATE SET began = EXCLUDED.began",
            (place,),
        )

    def end_upload(self, place: str) -> None:
        self.database.change("DELETE FROM onnx_uploads WHERE place = %s", (place,))

    def live_uploads(self, grace_seconds: float) -> set[str]:
        rows = self.database.rows(
            "SELECT place FROM onnx_uploads WHERE began > clock_timestamp() - make_interval(secs => %s)", (float(grace_seconds),)
        )
        return {str(row[0]) for row in rows}

    def stale_uploads(self, grace_seconds: float) -> set[str]:
        rows = self.database.rows(
            "SELECT place FROM onnx_uploads WHERE began <= clock_timestamp() - make_interval(secs => %s)", (float(grace_seconds),)
        )
        return {str(row[0]) for row in rows}

    def claim_upload(self, place: str) -> None:
        """The mark's time set to the epoch: stale for any grace, and no commit's any more."""
        self.database.change(
            "INSERT INTO onnx_uploads (place, began) VALUES (%s, 'epoch') ON CONFLICT (place) DO UPDATE SET began = 'epoch'", (place,)
        )

    def upload_open(self, place: str) -> bool:
        return self.database.one("SELECT 1 FROM onnx_uploads WHERE place = %s AND began > 'epoch'", (place,)) is not None

    # --- tenants

    def tenant_key(self, tenant: str) -> str:
        return tenant_key(tenant)

    def hold(self, owner: TenantRecord, model_id: str) -> bool:
        added = self.database.change(
            "INSERT INTO onnx_holdings (tenant_key, model_id, holding, created_ns) VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (tenant_key(owner.tenant), _storable_id(model_id), owner.model_dump_json(), owner.created_ns),
        )
        return added == 1

    def holding(self, tenant: str, model_id: str) -> TenantRecord | None:
        if not _is_id(model_id):
            return None
        query = "SELECT holding FROM onnx_holdings WHERE tenant_key = %s AND model_id = %s"
        row = self.database.one(query, (tenant_key(tenant), model_id))
        return None if row is None else TenantRecord.model_validate_json(row[0])

    def visible(self, tenant: str, model_id: str) -> bool:
        query = "SELECT 1 FROM onnx_holdings h JOIN onnx_models m ON m.id = h.model_id WHERE h.tenant_key = %s AND h.model_id = %s"
        return _is_id(model_id) and self.database.one(query, (tenant_key(tenant), model_id)) is not None

    def visible_record(self, tenant: str, model_id: str) -> StoredRecord | None:
        query = "SELECT m.record FROM onnx_holdings h JOIN onnx_models m ON m.id = h.model_id WHERE h.tenant_key = %s AND h.model_id = %s"
        row = self.database.one(query, (tenant_key(tenant), model_id)) if _is_id(model_id) else None
        return None if row is None else StoredRecord.model_validate_json(row[0])

    def holds(self, tenant: str, model_id: str) -> bool:
        query = "SELECT 1 FROM onnx_holdings WHERE tenant_key = %s AND model_id = %s"
        return _is_id(model_id) and self.database.one(query, (tenant_key(tenant), model_id)) is not None

    def let_go(self, tenant: str, model_id: str) -> bool:
        """The holding goes, and its graph mark with it (one row)."""
        if not _is_id(model_id):
            return False
        query = "DELETE FROM onnx_holdings WHERE tenant_key = %s AND model_id = %s"
        return self.database.change(query, (tenant_key(tenant), model_id)) == 1

    def held_by_anyone(self, model_id: str) -> bool:
        return _is_id(model_id) and self.database.one("SELECT 1 FROM onnx_holdings WHERE model_id = %s LIMIT 1", (model_id,)) is not None

    def held_by(self, tenant: str) -> list[str]:
        rows = self.database.rows("SELECT model_id FROM onnx_holdings WHERE tenant_key = %s", (tenant_key(tenant),))
        return [str(row[0]) for row in rows]

    def holders(self) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for model_id, key in self.database.rows("SELECT model_id, tenant_key FROM onnx_holdings"):
            found.setdefault(str(model_id), set()).add(str(key))
        return found

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
