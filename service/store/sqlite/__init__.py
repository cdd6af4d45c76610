"""The index in SQLite: one file in the store's folder, the default on one machine.

`index.SqliteIndex` is the SQL index (`service.store.sql.index`) over
`database.SqliteDatabase` (a connection per thread, write-ahead log, a
`BEGIN IMMEDIATE` transaction as the lock every change holds, across every
process that shares the store), migrated by `schema` (versioned in
`PRAGMA user_version`), whose second step carries over the file index of
the releases before it (`file_index`).

May import: `service.store` (its interface, records, layout, files, sql),
`service.errors`.
"""
