"""What the index's queries say differently in SQLite and in PostgreSQL.

Owns `Dialect` and its two values. The queries (`service.store.sql.index`)
are written once, with `%s` placeholders (SQLite's database turns them into
`?`), portable SQL everywhere else, and these fragments where the two
databases differ: the clock that ages the marks of content in flight. In
PostgreSQL that is the database's own (`clock_timestamp()`, one every
replica shares) in a timestamptz column; in SQLite, seconds since the epoch
as a real number, from the one machine's clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    name: str
    now: str  # the time now, as the marks' column holds it
    seconds_ago: str  # the time one parameter's seconds ago
    epoch: str  # the earliest time: a mark set to it is stale for any grace


POSTGRES = Dialect(
    name="postgresql",
    now="clock_timestamp()",
    seconds_ago="clock_timestamp() - make_interval(secs => %s)",
    epoch="'epoch'::timestamptz",
)
_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
SQLITE = Dialect(name="sqlite", now=_SQLITE_NOW, seconds_ago=f"({_SQLITE_NOW} - %s)", epoch="0.0")
