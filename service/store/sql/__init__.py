"""The index in SQL: one schema's queries, over SQLite or PostgreSQL.

`index.SqlIndex` implements `service.store.interface.Index` with one set of
queries, written once for both databases (`dialect` holds the few fragments
that differ: the clock). A database is `database.SqlDatabase`: SQLite on one
machine (`service.store.sqlite`, the default) or PostgreSQL for a fleet
(`service.store.postgres`); each keeps its own versioned migrations to the
same tables.

May import: `service.store` (its interface, records, files, eviction),
`service.errors`, `service.store.memo`.
"""
