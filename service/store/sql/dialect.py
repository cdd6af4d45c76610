"""What the index's queries and its schema say differently in SQLite and in PostgreSQL.

Owns `Dialect` and its two values. The queries (`service.store.sql.index`,
`service.store.sql.upload_rows`) and the migrations (`service.store.sql.schema`)
are written once, with `%s` placeholders (SQLite's database turns them into
`?`), portable SQL everywhere else, and these fragments where the two
databases differ: the clock that ages the marks of content in flight and
times the resumable uploads (in PostgreSQL the database's own,
`clock_timestamp()`, one every replica shares, in timestamptz columns; in
SQLite, seconds since the epoch as a real number, from the one machine's
clock), and the column types of the schema (`types`: `{key}`, `{bigint}`,
`{time}`, ... in a migration's statements).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Dialect:
    name: str
    now: str  # the time now, as the time columns hold it
    seconds_ago: str  # the time one parameter's seconds ago
    seconds_ahead: str  # the time one parameter's seconds from now
    epoch: str  # the earliest time: a mark set to it is stale for any grace, a lease ending then is no lease
    unix_time: str  # a time column (`{}`) as Unix seconds, a float
    from_unix: str  # one parameter's Unix seconds as a time
    types: dict[str, str] = field(default_factory=dict)  # the schema's names for its column types, and its defaults

    def ddl(self, statement: str) -> str:
        """A migration's statement, its `{type}` names filled in."""
        return statement.format(**self.types)


POSTGRES = Dialect(
    name="postgresql",
    now="clock_timestamp()",
    seconds_ago="clock_timestamp() - make_interval(secs => %s)",
    seconds_ahead="clock_timestamp() + make_interval(secs => %s)",
    epoch="'epoch'::timestamptz",
    unix_time="extract(epoch FROM {})::float8",
    from_unix="to_timestamp(%s)",
    types={
        "key": 'text COLLATE "C"',  # ids and keys compared as Python compares strings
        "text": "text",
        "integer": "integer",
        "bigint": "bigint",
        "boolean": "boolean",
        "false": "false",
        "true": "true",
        "time": "timestamptz",
        "time_now": "timestamptz NOT NULL DEFAULT now()",
        "time_never": "timestamptz NOT NULL DEFAULT '-infinity'",
    },
)
_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
SQLITE = Dialect(
    name="sqlite",
    now=_SQLITE_NOW,
    seconds_ago=f"({_SQLITE_NOW} - %s)",
    seconds_ahead=f"({_SQLITE_NOW} + %s)",
    epoch="0.0",
    unix_time="{}",
    from_unix="%s",
    types={
        "key": "TEXT",
        "text": "TEXT",
        "integer": "INTEGER",
        "bigint": "INTEGER",
        "boolean": "INTEGER",
        "false": "0",
        "true": "1",
        "time": "REAL",
        "time_now": "REAL NOT NULL",  # always written by the queries: SQLite has no default of the clock here
        "time_never": "REAL NOT NULL DEFAULT 0.0",
    },
)
