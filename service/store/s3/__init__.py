"""Bytes on S3-compatible object storage (AWS S3, Ceph RGW, SeaweedFS, MinIO).

Owns `BucketBlobs` (`blobs`: the `service.store.interface.Blobs` of
`--store s3://BUCKET/PREFIX`), the client and its errors (`objects`:
obstore, the endpoint and credentials from the standard AWS environment,
ranged reads as a `ByteSource`) and the local cache of what must be a file
(`local_cache`: catalogues and graph documents, bounded by
`--cache-max-bytes`). The index of such a store is in PostgreSQL
(`service.store.postgres`).

May import: `service.errors`, `service.store` (its interface, records, layout,
byte_source, data_root, files, work_area), obstore.
"""
