"""The index in PostgreSQL: one database that any number of service
processes, on any machines, share as one index.

`index.PostgresIndex` is the SQL index (`service.store.sql`) over the
tables of `schema` (versioned, migrated at open under an advisory lock) and
the pooled connections of `database` (the lock every change holds, the
database's faults as `StorageUnavailable`). Content lives elsewhere (object
storage): this package holds only what changes.

May import: `service.store` (its interface, records, files, sql), `service.errors`,
psycopg and psycopg_pool.
"""
