"""Where imported models live: content and index behind one interface.

Owns the storage interface (`interface`: `Content`, immutable blobs of a
model, and `Index`, its records, tenants, usage and eviction order), the
policy over any pair of them (`model_store.Store`: commit, quotas,
eviction, release), the records, the catalogue reader and the findings'
writer, the local work area and the backends: content in `local/` (a
folder, the default) or `s3/`; the index in SQL (`sql/`, one set of
queries) over `sqlite/` (a file in the store's folder, the default) or
`postgres/` (a fleet's); and `memory` (the unit tests' in-process one). Also the data root, read-only (`data_root.DataRoot`: a
folder, `folder_root`, or a bucket, `s3/bucket_root`). Only this package
opens store files.

May import: `service.sandbox.protocol` (the catalogue's format), `importer`
(element types). Never `service.http` or `service.imports`.
"""
