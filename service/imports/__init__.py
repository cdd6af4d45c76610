"""The import use case, without HTTP: an input -> a worker -> identity -> commit.

Owns the import of an upload or a data-root path (`flow`), the graph render
on first request (`graph`), each tenant's own check runs and their rerun on
a stored model (`tenant_checks`, `recheck`) and admission control: worker slots, the queue,
receiving places (`limiter`), shared by the front-end processes
(`place_locks`). Its functions take the parts they need (`parts.ImportParts`:
settings, store, sandbox, limiter, data root; never the service's state)
and parsed inputs, and return results; they never see a Request or build a
Response, and they raise typed errors
(`service.imports.errors`, the store's, the sandbox's) that
`service.http.problems` maps to problems.

May import: `service.store`, `service.sandbox`, `service.paths`, the settings.
Never `service.http` or `service.state`.
"""
