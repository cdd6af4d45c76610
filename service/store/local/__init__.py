"""The local store's content: one folder per model (the default backend).

Layout under the store root (`--store`):
    models/<id>/...         a model's content (`service.store.layout.ModelFolder`)
    index.sqlite (-wal, -shm)  the index (`service.store.sqlite`)
    tmp/                    the work area (`service.store.work_area`)

A store written before the SQL index also has tenants/, lock, usage and a
record.json and an lru in each model's folder: its file index, carried
over once into index.sqlite (`service.store.sqlite.file_index`), then unread.

A model folder appears whole (renamed in from a work folder, every file
fsynced first) and is recorded after; eviction and deletion rename it out of
models/ before deleting it, so a reader sees a model whole or not at all (an
open file stays readable). Several service processes may share one store:
every change holds the index's write lock.

May import: `service.store` (its interface, records, layout, files),
`service.paths`, `service.errors`.
"""
