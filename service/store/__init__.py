"""Where imported models live: bytes and an index, each behind one seam.

Owns the two seams (`interface.Blobs`: immutable objects of bytes by key;
the SQL index, `sql.index.SqlIndex`: the records, tenants, usage, eviction
order, the secrets every replica shares and the resumable uploads' rows, one set of queries and one
versioned schema, `sql.schema`, over `sqlite/` (a file in the store's
folder, the default) or `postgres/` (a fleet's)), each model's content laid
out on any `Blobs` (`content.Content`), the resumable uploads' parts on any
`Blobs` beside their rows (`uploads.ResumableUploads`), the policy over them
(`model_store.Store`: commit, quotas, eviction, release, a tensor read
consistently), the records, the catalogue reader and the findings' writer,
the local work area, the opening of a store whose storage may not answer
yet, and the backends of bytes: `local/` (a folder, the default) or `s3/`
(a bucket). Also the data root, read-only (`data_root.DataRoot`: a folder,
`folder_root`, or a bucket, `s3/bucket_root`). Only this package opens store files.

May import: `service.tasks.catalog_format` (the catalogue's format),
`importer` (element types), `service.settings` (the backends the settings
name), `service.background` (a store opening in the background), `service.errors`. Never `service.api`
or `service.imports`.
"""
