"""The index's tables, for SQLite and PostgreSQL alike: one versioned list
of migrations, and the one step that brings a database up to date.

Owns `MIGRATIONS` and `migrate`. Each migration is written once, its column
types named (`{key}`, `{bigint}`, `{time}`, ...: `Dialect.ddl` fills them
in for the database), with a database's own statements only where the two
cannot say the same thing (the totals' trigger); a migration may also run
code (the carry-overs from older layouts). The version is the number of
migrations applied, kept in `onnx_schema`; `migrate` runs what is missing
in the database's migration transaction (`SqlDatabase.migrating`: under
PostgreSQL's schema lock, SQLite's write lock), so of several processes or
replicas starting at once the first migrates and the others find it
current. A version newer than this list (a later release's) is used as it
is: migrations only add, but for the eighth, which drops tables no
release since reads. The tables, all named `onnx_*`:

    onnx_models     a stored model: its record (`StoredRecord`, as JSON), the
                    bytes it takes, its last use (ns since the epoch) and the
                    content place its record names ('' for the id itself)
    onnx_holdings   tenant (by key, `service.store.sql.index.tenant_key`)
                    holds model: the tenant's record (`TenantRecord`, as
                    JSON), when it took it (its `created_ns`, ordering the
                    tenant's listing), whether the model's graph was rendered
                    for it once, the check stages it ran (`CheckRuns`, as
                    JSON) and the label it gave the model (its name is the
                    record's `input`). No foreign key to onnx_models: a holding may be
                    written in the same locked block before or after the
                    model's record, and dropping a model deletes its holdings itself
    onnx_uploads    content in flight: a place a commit is putting, or a
                    removal deleting, and when it began (`Store.collect_garbage`)
    onnx_resumable_uploads  resumable uploads (tus) in the making
                    (`service.store.uploads`, `service.store.sql.upload_rows`):
                    the tenant (by key), the declared length and metadata,
                    the bytes of its recorded parts, the next part's number,
                    the last write (the expiry counts from it) and the lease
                    of the one request writing it
    onnx_resumable_parts  an upload's recorded parts (each an object of the
                    store's bytes): number, size
    onnx_totals     one row: the bytes and the number of the stored models,
                    kept by a trigger on onnx_models at each insert, delete
                    and change of size, whichever process wrote it; read in
                    one lookup, where a sum would scan every model
    onnx_secrets    secrets the service makes once and every process and
                    replica shares, by name (the report links' key,
                    `service.imports.report_links`): made with an insert
                    that keeps the first one written
    onnx_registry_deliveries  the MLflow gate's delivery markers: a delivery
                    id's key and when it was taken (a replay to any replica
                    is a duplicate; `service.store.sql.registry_rows`)
    onnx_registry_claims  the MLflow gate's claims (a registered model's
                    alias, moved by one holder at a time): the key, the
                    holder's token and the end of its lease
    onnx_harbor_scans  the Harbor scanner's scans: the scan id, its state
                    (running, done, error), its body (the report's JSON, or
                    the error's message), when it was asked for (it expires
                    from then) and the lease of the process running it (a
                    running scan whose lease lapsed died with its process)
    onnx_schema     one row: the version

The records are JSON in text columns (read with one parse, written as the
model dumps them; PostgreSQL's jsonb would refuse a "\\u0000" in a client's
name). PostgreSQL compares ids and keys in the "C" collation, so it orders
them as Python and SQLite do (the listing's paging key is (created_ns, id)).

Two histories came before this list, and are its first six migrations:
PostgreSQL's numbered them the same (a fleet's database at version 5 runs
7 on); a local store's SQLite file kept its own in `PRAGMA user_version`:
its version 1 had the tables of 1, 2 and 4 here (3 was PostgreSQL's alone),
its version 2 also the file index carried over (6 here), and either
continues from there (`LOCAL_HISTORY`). `user_version` then follows the
version here, so a release before this list sees a schema newer than its
own and uses it as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from service.store.sql.carry_over import carry_over_file_index, carry_over_local_uploads
from service.store.sql.database import Migrating, SqlDatabase

log = logging.getLogger("service.store")

Carry = Callable[[Migrating, Path], None]  # a carry-over from a store folder's older layout


@dataclass(frozen=True)
class Migration:
    note: str
    statements: list[str] = field(default_factory=list)  # for both databases
    only: dict[str, list[str]] = field(default_factory=dict)  # a database's own (by dialect name), after `statements`
    carry: Carry | None = None  # run with the store's folder, where the index has one
    carry_on: tuple[str, ...] = ("sqlite", "postgresql")  # the databases `carry` runs on


VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS onnx_schema (
    singleton {boolean} PRIMARY KEY DEFAULT {true} CHECK (singleton = {true}),
    version {integer} NOT NULL
)"""

MIGRATIONS: list[Migration] = [
    Migration(
        "1: models, holdings, marks of content in flight",
        [
            """
            CREATE TABLE onnx_models (
                id {key} PRIMARY KEY,
                record {text} NOT NULL,
                size {bigint} NOT NULL,
                last_use_ns {bigint} NOT NULL,
                place {key} NOT NULL DEFAULT ''
            )""",
            "CREATE INDEX onnx_models_by_last_use ON onnx_models (last_use_ns, id)",
            """
            CREATE TABLE onnx_holdings (
                tenant_key {key} NOT NULL,
                model_id {key} NOT NULL,
                holding {text} NOT NULL,
                created_ns {bigint} NOT NULL,
                graph_rendered {boolean} NOT NULL DEFAULT {false},
                PRIMARY KEY (tenant_key, model_id)
            )""",
            "CREATE INDEX onnx_holdings_newest ON onnx_holdings (tenant_key, created_ns DESC, model_id DESC)",
            "CREATE INDEX onnx_holdings_by_model ON onnx_holdings (model_id)",
            "CREATE TABLE onnx_uploads (place {key} PRIMARY KEY, began {time_now})",
        ],
    ),
    Migration(
        "2: each holding's own check runs (`CheckRuns`, as JSON; '' for none yet)",
        ["ALTER TABLE onnx_holdings ADD COLUMN checks {text} NOT NULL DEFAULT ''"],
    ),
    Migration(
        "3: a fleet's resumable uploads as S3 multipart uploads (a release's before; dropped by 8)",
        only={
            "postgresql": [
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
            ]
        },
    ),
    Migration(
        # The trigger first: in PostgreSQL it locks onnx_models against writers, so the sum below misses none.
        "4: the byte total and the model count, one row kept by a trigger",
        only={
            "postgresql": [
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
            "sqlite": [
                """
                CREATE TABLE onnx_totals (
                    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
                    bytes INTEGER NOT NULL,
                    models INTEGER NOT NULL
                )""",
                """
                CREATE TRIGGER onnx_models_added AFTER INSERT ON onnx_models
                BEGIN UPDATE onnx_totals SET bytes = bytes + NEW.size, models = models + 1; END""",
                """
                CREATE TRIGGER onnx_models_dropped AFTER DELETE ON onnx_models
                BEGIN UPDATE onnx_totals SET bytes = bytes - OLD.size, models = models - 1; END""",
                """
                CREATE TRIGGER onnx_models_resized AFTER UPDATE OF size ON onnx_models
                BEGIN UPDATE onnx_totals SET bytes = bytes + NEW.size - OLD.size; END""",
                "INSERT INTO onnx_totals (singleton, bytes, models) SELECT 1, COALESCE(SUM(size), 0), count(*) FROM onnx_models",
            ],
        },
    ),
    Migration(
        "5: resumable uploads whose parts are objects of the store's bytes",
        [
            """
            CREATE TABLE onnx_resumable_uploads (
                id {key} PRIMARY KEY,
                tenant_key {key} NOT NULL,
                length {bigint} NOT NULL,
                metadata {text} NOT NULL,
                filename {text} NOT NULL,
                created_ns {bigint} NOT NULL,
                parts_bytes {bigint} NOT NULL DEFAULT 0,
                next_part {integer} NOT NULL DEFAULT 1,
                last_write {time_now},
                lease {key} NOT NULL DEFAULT '',
                lease_until {time_never}
            )""",
            "CREATE INDEX onnx_resumable_uploads_by_tenant ON onnx_resumable_uploads (tenant_key)",
            "CREATE INDEX onnx_resumable_uploads_by_last_write ON onnx_resumable_uploads (last_write)",
            """
            CREATE TABLE onnx_resumable_parts (
                upload_id {key} NOT NULL REFERENCES onnx_resumable_uploads (id) ON DELETE CASCADE,
                number {integer} NOT NULL,
                size {bigint} NOT NULL,
                PRIMARY KEY (upload_id, number)
            )""",
        ],
    ),
    Migration(
        "6: the file index of a local store written before the SQL index, carried over once",
        carry=carry_over_file_index,
        carry_on=("sqlite",),
    ),
    Migration(
        "7: the resumable uploads a store's folder kept in files (upload.json beside their bytes), carried over as rows",
        carry=carry_over_local_uploads,
    ),
    Migration(
        "8: the tables of the S3 multipart uploads (3), which no release since reads",
        ["DROP TABLE IF EXISTS onnx_tus_parts", "DROP TABLE IF EXISTS onnx_tus_uploads"],
    ),
    Migration(
        "9: the label a tenant gave its model ('' for none), beside the holding's record (its name is the record's `input`)",
        ["ALTER TABLE onnx_holdings ADD COLUMN label {text} NOT NULL DEFAULT ''"],
    ),
    Migration(
        "10: secrets made once and shared by every replica (the report links' key), by name",
        ["CREATE TABLE onnx_secrets (name {key} PRIMARY KEY, value {text} NOT NULL)"],
    ),
    Migration(
        "11: the MLflow gate's delivery markers and alias claims, shared by every replica",
        [
            "CREATE TABLE onnx_registry_deliveries (id {key} PRIMARY KEY, taken {time_now})",
            "CREATE INDEX onnx_registry_deliveries_by_taken ON onnx_registry_deliveries (taken)",
            "CREATE TABLE onnx_registry_claims (name {key} PRIMARY KEY, holder {key} NOT NULL, until {time} NOT NULL)",
        ],
    ),
    Migration(
        "12: each holding's latest attestation (a Sigstore bundle's JSON, service.attestation; '' for none)",
        ["ALTER TABLE onnx_holdings ADD COLUMN attestation {text} NOT NULL DEFAULT ''"],
    ),
    Migration(
        "13: the Harbor scanner's scans (service.registry.harbor_scanner), answered by any replica until they expire",
        [
            "CREATE TABLE onnx_harbor_scans (id {key} PRIMARY KEY, state {text} NOT NULL, body {text} NOT NULL DEFAULT '',"
            " created {time_now}, until {time} NOT NULL)",
            "CREATE INDEX onnx_harbor_scans_by_created ON onnx_harbor_scans (created)",
        ],
    ),
]

# A local store's SQLite history before this list (`PRAGMA user_version`): its
# version -> (this list's version it matches, migrations after that it had done).
LOCAL_HISTORY: dict[int, tuple[int, frozenset[int]]] = {
    1: (4, frozenset()),  # the tables of 1, 2 and 4
    2: (4, frozenset({6})),  # and the file index carried over
}


def _version(migrating: Migrating) -> tuple[int, frozenset[int]]:
    """The schema's version, and the migrations after it that are done already."""
    dialect = migrating.dialect
    migrating.execute(dialect.ddl(VERSION_TABLE))
    rows = migrating.execute("SELECT version FROM onnx_schema")
    if rows:
        return int(rows[0][0]), frozenset()
    known: tuple[int, frozenset[int]] = (0, frozenset())
    if dialect.name == "sqlite":
        legacy = int(migrating.execute("PRAGMA user_version")[0][0])
        known = LOCAL_HISTORY.get(legacy, (legacy, frozenset()))
    migrating.execute("INSERT INTO onnx_schema (version) VALUES (%s)", (known[0],))
    return known


def migrate(database: SqlDatabase, folder: Path | None) -> int:
    """Bring the database's schema up to date; the number of migrations this
    call applied (0 when it was current). `folder`: the store's folder the
    carry-overs read (a folder store's), None for none."""
    with database.migrating() as migrating:
        version, done = _version(migrating)
        if version > len(MIGRATIONS):
            log.warning("the index's schema is at version %d, newer than this service's %d: used as it is", version, len(MIGRATIONS))
            return 0
        dialect = migrating.dialect
        applied = 0
        for number, migration in enumerate(MIGRATIONS[version:], start=version + 1):
            if number in done:
                continue
            for statement in [*migration.statements, *migration.only.get(dialect.name, [])]:
                migrating.execute(dialect.ddl(statement))
            if migration.carry is not None and folder is not None and dialect.name in migration.carry_on:
                migration.carry(migrating, folder)
            applied += 1
        if version != len(MIGRATIONS):
            migrating.execute("UPDATE onnx_schema SET version = %s", (len(MIGRATIONS),))
            if dialect.name == "sqlite":
                migrating.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
    if applied:
        log.info("the index's schema migrated from version %d to %d", version, len(MIGRATIONS))
    return applied
