"""The import use case, without HTTP: one pipeline every import goes through.

Owns the pipeline (`pipeline.run`: admission, staging, workers, checks and
catalogue, commit, answer, each written once), its sources (`sources`: an
upload's body, finished resumable uploads, a data-root folder or bucket, a
model the store holds; the registry adds its own), what they stage with
(`staging`), the worker step (`workers`), the model's identity
(`identity`), each tenant's own check runs and view (`tenant_checks`), the
graph render on first request (`graph`), the comparison of two models
(`diff`), the capability links that open a tenant's report without an API
key (`report_links`) and admission, fair between tenants: worker slots, the queue,
receiving places (`admission`), shared by the front-end processes
(`place_locks`). Its functions take the parts they need
(`parts.ImportParts`: settings, store, sandbox, admission, data root;
never the service's state) and sources, and return results; they never see
a Request or build a Response, and they raise typed errors
(`service.errors`, the store's, the sandbox's) that `service.api.problems`
maps to problems.

May import: `service.store`, `service.sandbox`, `service.checks` (the stages
asked, their runs, the check worker), `service.attestation` (a run's signed
attestation, `attesting`), `service.tasks` (the catalogue's format),
`service.settings`, `service.errors`. Never `service.api`.
"""
