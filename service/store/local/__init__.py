"""The local store: content and index in one folder (the default backend).

Layout under the store root (`--store`):
    models/<id>/...         a model's content (`service.store.layout.ModelFolder`),
                            with its record.json and lru kept there by the index
    tenants/<T>/<id>.json   tenant T holds model <id> (`tenants`)
    tmp/                    the work area (`service.store.work_area`)
    lock, usage             flock for every change; the byte total (a cache:
                            recomputed from the lru files at start)

A model folder appears whole (renamed in from a work folder, every file
fsynced first) and is recorded after; eviction and deletion rename it out of
models/ before deleting it, so a reader sees a model whole or not at all (an
open file stays readable). Several service processes may share one store:
every change is serialized by an exclusive flock on `lock`.

May import: `service.store` (its interface, records, layout, files),
`service.paths`, `service.errors`.
"""
