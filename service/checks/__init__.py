"""Check stages: what a registry needs to accept or refuse a model version; one home for them.

Owns the vocabulary every side shares (`outcome`: stages, statuses,
`Finding`, `StageResult`, the verdict; `rules`: every finding's code), the
stages themselves (`stages/`, which run inside a sandboxed worker), a check
worker's run as the front end sees it (`check_worker`; the signature
worker's, on the model's folder: `signature_worker`), what an import asks
and how its workers' reports become its runs (`requested`), each tenant's
own runs (`runs`, `tenant_runs`), the findings kept in a model's catalogue
(`findings`) and the reports made from them (`report`, `sarif`, `junit`;
`local_attestation`, a local run's signed attestation;
`bindings_text`, the smoke runs' bindings as one line for a registry's tags);
`command` is the `onnx-import` console script, which runs the stages in the
same workers without a server.

May import: `importer`, `service.settings`, `service.errors`,
`service.sandbox` (the front-end side: the supervisor, the protocol),
`service.tasks`' catalogue format, `service.store` (the front-end side:
the runs and findings it keeps), `service.attestation` (`command`'s
`--attest` and `verify`: `local_attestation`), `service.registry` (`command`'s
`verify oci://` only: `oci_verify`, imported when an artifact is named, and
with it the OCI gate's pull, which confines paths as the import does). `stages/` runs in the fork and imports
none of the front-end side. Never `service.api` or `service.imports`.
"""
