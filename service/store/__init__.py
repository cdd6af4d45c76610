"""Where imported models live: bytes and an index, each behind one interface.

Owns the storage interface (`interface`: `Blobs`, immutable objects of
bytes by key, and `Index`, the records, tenants, usage and eviction order),
each model's content laid out on any `Blobs` (`content.Content`), the
policy over them (`model_store.Store`: commit, quotas, eviction, release),
the records, the catalogue reader and the findings' writer, the local work
area and the backends: bytes in `local/` (a folder, the default) or `s3/`
(a bucket); the index in SQL (`sql/`, one set of queries) over `sqlite/` (a
file in the store's folder, the default) or `postgres/` (a fleet's). Also
the data root, read-only (`data_root.DataRoot`: a folder, `folder_root`, or
a bucket, `s3/bucket_root`). Only this package opens store files.

May import: `service.sandbox.protocol` (the catalogue's format), `importer`
(element types). Never `service.http` or `service.imports`.
"""
