"""The index's tables in PostgreSQL, versioned: what each migration adds, and
the one step that brings a database up to date.

Owns `MIGRATIONS` (each a list of SQL statements; the schema's version is the
number applied, kept in `onnx_schema`) and `migrate`, run by every replica as
it opens: in one transaction holding an advisory lock (`SCHEMA_LOCK`), so of
two replicas starting at once the first migrates and the second finds the
version current. Migrations only ever add (tables, columns with defaults,
indexes): a replica of the version before runs on a schema one newer, as in a
rolling upgrade. The tables, all named `onnx_*`:

    onnx_models     a stored model: its record (`StoredRecord`, as JSON), the
                    bytes it takes, its last use (ns since the epoch) and the
                    content place its record names ('' for the id itself)
    onnx_holdings   tenant (by key, `PostgresIndex.tenant_key`) holds model:
                    the tenant's record (`TenantRecord`, as JSON), when it took
                    it (its `created_ns`, ordering the tenant's listing) and
                    whether the model's graph was rendered for it once, and
                    the check stages it ran (`CheckRuns`, as JSON). No
                    foreign key to onnx_models: a holding may be written in the
                    same locked block before or after the model's record, and
                    dropping a model deletes its holdings itself
    onnx_uploads    commits in flight: a content place and when its upload began
    onnx_resumable_uploads  resumable uploads (tus) in the making, any
                    replica's (`service.store.postgres.uploads`): the tenant
                    (by key), the declared length and metadata, the bytes of
                    its recorded parts, the next part's number, the last write
                    (the database's clock: the expiry counts from it) and the
                    lease of the one request writing it
    onnx_resumable_parts  a resumable upload's recorded parts (each an
                    object of the store's): number, size (deleted with their
                    upload)
    onnx_tus_uploads, onnx_tus_parts  the same, of the release before
                    (migration 3: the parts of an S3 multipart upload), left
                    to its replicas during a rolling update, unread here
    onnx_totals     one row: the bytes and the number of the stored models,
                    kept by a trigger on onnx_models (`onnx_count_totals`) at
                    each insert, delete and change of size, whichever
                    replica's version wrote it; read in one lookup, where a
                    sum would scan every model (0.3 s at a million)

The records are JSON in text columns (read with one parse, written as the
model dumps them; jsonb would refuse a "\\u0000" in a client's name). Ids and
keys are compared in the "C" collation, so the database orders them as
Python orders strings (the listing's paging key is (created_ns, id)).
"""

from __future__ import annotations

import logging

import psycopg
from psycopg.rows import TupleRow

log = logging.getLogger("service.store")

# pg_advisory_xact_lock keys (signed 64-bit): the first 8 bytes of the SHA-256
# of "onnx-import-service: the schema lock", of "... the index lock" and of "... the uploads lock".
SCHEMA_LOCK = 8046182319371317534
INDEX_LOCK = -2374340273633317047
UPLOADS_LOCK = -1617302126661238175

VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS onnx_schema (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version integer NOT NULL
)"""

MIGRATIONS: list[list[str]] = [
    [  # 1: models, holdings, uploads
        """
        CREATE TABLE onnx_models (
            id text COLLATE "C" PRIMARY KEY,
            record text NOT NULL,
            size bigint NOT NULL,
            last_use_ns bigint NOT NULL,
            place text COLLATE "C" NOT NULL DEFAULT ''
        )""",
        "CREATE INDEX onnx_models_by_last_use ON onnx_models (last_use_ns, id)",
        """
        CREATE TABLE onnx_holdings (
            tenant_key text COLLATE "C" NOT NULL,
            model_id text COLLATE "C" NOT NULL,
            holding text NOT NULL,
            created_ns bigint NOT NULL,
            graph_rendered boolean NOT NULL DEFAULT false,
            PRIMARY KEY (tenant_key, model_id)
        )""",
        "CREATE INDEX onnx_holdings_newest ON onnx_holdings (tenant_key, created_ns DESC, model_id DESC)",
        "CREATE INDEX onnx_holdings_by_model ON onnx_holdings (model_id)",
        """
        CREATE TABLE onnx_uploads (
            place text COLLATE "C" PRIMARY KEY,
            began timestamptz NOT NULL DEFAULT now()
        )""",
    ],
    [  # 2: each holding's own check runs (`CheckRuns`, as JSON; '' for none yet)
        "ALTER TABLE onnx_holdings ADD COLUMN checks text NOT NULL DEFAULT ''",
    ],
    [  # 3: resumable uploads any replica continues (their bytes: S3 multipart parts)
        """
        CREATE TABLE onnx_tus_uploads (
            id text COLLATE "C" PRIMARY KEY,
            tenant_key text COLLATE "C" NOT NULL,
            length bigint NOT NULL,
            metadata text NOT NULL,
            filename text NOT NULL,
            created_ns bigint NOT NULL,
            multipart_id text NOT NULL DEFAULT '',
            parts_bytes bigint NOT NULL DEFAULT 0,
            next_part integer NOT NULL DEFAULT 1,
            incomplete bigint NOT NULL DEFAULT 0,
            incomplete_key text NOT NULL DEFAULT '',
            completed boolean NOT NULL DEFAULT false,
            last_write timestamptz NOT NULL DEFAULT now(),
            lease text COLLATE "C" NOT NULL DEFAULT '',
            lease_until timestamptz NOT NULL DEFAULT '-infinity'
        )""",
        "CREATE INDEX onnx_tus_uploads_by_tenant ON onnx_tus_uploads (tenant_key)",
        "CREATE INDEX onnx_tus_uploads_by_last_write ON onnx_tus_uploads (last_write)",
        """
        CREATE TABLE onnx_tus_parts (
            upload_id text COLLATE "C" NOT NULL REFERENCES onnx_tus_uploads (id) ON DELETE CASCADE,
            number integer NOT NULL,
            etag text NOT NULL,
            size bigint NOT NULL,
            PRIMARY KEY (upload_id, number)
        )""",
    ],
    [  # 4: the byte total and the model count, one row kept by a trigger (the trigger
        # first: it locks onnx_models against writers, so the sum below misses none)
        """
        CREATE TABLE onnx_totals (
            singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            bytes bigint NOT NULL,
            models bigint NOT NULL
        )""",
        """
        CREATE FUNCTION onnx_count_totals() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'INSERT' THEN
                UPDATE onnx_totals SET bytes = bytes + NEW.size, models = models + 1;
            ELSIF TG_OP = 'DELETE' THEN
                UPDATE onnx_totals SET bytes = bytes - OLD.size, models = models - 1;
            ELSE
                UPDATE onnx_totals SET bytes = bytes + NEW.size - OLD.size;
            END IF;
            RETURN NULL;
        END
        $$""",
        """
        CREATE TRIGGER onnx_models_totals AFTER INSERT OR DELETE OR UPDATE OF size ON onnx_models
        FOR EACH ROW EXECUTE FUNCTION onnx_count_totals()""",
        "INSERT INTO onnx_totals (bytes, models) SELECT COALESCE(SUM(size), 0), count(*) FROM onnx_models",
    ],
    [  # 5: resumable uploads whose parts are objects of the store's (`service.store.fleet_uploads`)
        """
        CREATE TABLE onnx_resumable_uploads (
            id text COLLATE "C" PRIMARY KEY,
            tenant_key text COLLATE "C" NOT NULL,
            length bigint NOT NULL,
            metadata text NOT NULL,
            filename text NOT NULL,
            created_ns bigint NOT NULL,
            parts_bytes bigint NOT NULL DEFAULT 0,
            next_part integer NOT NULL DEFAULT 1,
            last_write timestamptz NOT NULL DEFAULT now(),
            lease text COLLATE "C" NOT NULL DEFAULT '',
            lease_until timestamptz NOT NULL DEFAULT '-infinity'
        )""",
        "CREATE INDEX onnx_resumable_uploads_by_tenant ON onnx_resumable_uploads (tenant_key)",
        "CREATE INDEX onnx_resumable_uploads_by_last_write ON onnx_resumable_uploads (last_write)",
        """
        CREATE TABLE onnx_resumable_parts (
            upload_id text COLLATE "C" NOT NULL REFERENCES onnx_resumable_uploads (id) ON DELETE CASCADE,
            number integer NOT NULL,
            size bigint NOT NULL,
            PRIMARY KEY (upload_id, number)
        )""",
    ],
]


def migrate(connection: psycopg.Connection[TupleRow]) -> int:
    """Bring the database's schema up to date (a connection in autocommit);
    the number of migrations this call applied (0 when it was current)."""
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        connection.execute(VERSION_TABLE)
        connection.execute("INSERT INTO onnx_schema (version) VALUES (0) ON CONFLICT DO NOTHING")
        row = connection.execute("SELECT version FROM onnx_schema").fetchone()
        version = int(row[0]) if row else 0
        if version > len(MIGRATIONS):
            log.warning("the index's schema is at version %d, newer than this service's %d: used as it is", version, len(MIGRATIONS))
            return 0
        for statements in MIGRATIONS[version:]:
            for statement in statements:
                connection.execute(statement)
        connection.execute("UPDATE onnx_schema SET version = %s", (len(MIGRATIONS),))
    applied = len(MIGRATIONS) - version
    if applied:
        log.info("the index's schema migrated from version %d to %d", version, len(MIGRATIONS))
    return applied
