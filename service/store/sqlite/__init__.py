"""The index in SQLite: one file in the store's folder, the default on one machine.

`index.SqliteIndex` is the SQL index (`service.store.sql.index`) over
`database.SqliteDatabase` (a connection per thread, write-ahead log, a
`BEGIN IMMEDIATE` transaction as the lock every change holds, across every
process that shares the store), migrated by the one schema
(`service.store.sql.schema`), which carries the older layouts of the
store's folder over once.

May import: `service.store` (its sql package), `service.errors`.
"""
