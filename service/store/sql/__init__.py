"""The index in SQL: one schema and one set of queries, over SQLite or PostgreSQL.

`index.SqlIndex` is the store's index, its queries written once for both
databases; `uploads.UploadRows` the resumable uploads' rows;
`registry_rows.RegistryRows` the MLflow gate's delivery markers and alias
claims, shared by a fleet; `schema` the
one versioned list of migrations both run (`carry_over`: the two that read
a folder store's older layouts); `dialect` holds the few fragments that
differ (the clock, the column types). A database is `database.SqlDatabase`,
the seam below: SQLite on one machine (`service.store.sqlite`, the
default) or PostgreSQL for a fleet (`service.store.postgres`).

May import: `service.store` (its records, files, layout, eviction),
`service.errors`, `service.store.memo`.
"""
