"""The index in PostgreSQL: one database that any number of service
processes, on any machines, share as one index.

`index.PostgresIndex` is the SQL index (`service.store.sql`: its queries
and its one versioned schema, migrated at open under an advisory lock) over
the pooled connections of `database` (the locks changes hold, the
database's faults as `StorageUnavailable`, naming the database and user).
Content lives elsewhere (object storage): this package holds only what changes.

May import: `service.store` (its interface, records, files, sql), `service.errors`,
psycopg and psycopg_pool.
"""
