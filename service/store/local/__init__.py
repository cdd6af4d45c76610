"""The local store's bytes: files of one folder (the default backend).

Layout under the store root (`--store`):
    models/<id>/<generation>/...  a model's content (`service.store.content`, `service.store.layout.ModelFolder`)
    uploads/<T>/<id>/data         a resumable upload's bytes, appended in place (`service.store.uploads`)
    index.sqlite (-wal, -shm)     the index (`service.store.sqlite`)
    tmp/                          the work area (`service.store.work_area`)

A store written before generations keeps each model at models/<id>/, and
one written before the SQL index also has tenants/, lock, usage and a
record.json and an lru in each model's folder: its file index, carried
over once into index.sqlite (`service.store.sql.carry_over`), then unread;
one written before the uploads' rows has an upload.json beside each
upload's data, carried over alike.

Each file is fsynced and renamed in whole (`blobs.FolderBlobs`), and
recorded after; a removal is recorded first, then its files deleted, so a
reader sees a model whole or not at all (an open file stays readable).
Several service processes may share one store: every change holds the
index's write lock.

May import: `service.store` (its interface, records, byte_source, files,
open_files), `service.store.client_paths`, `service.errors`.
"""
