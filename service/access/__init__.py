"""Who may call: API keys, their scopes and tenants.

Owns the key file and its reload (`keys`) and the FastAPI dependencies that
turn a request's credentials into a caller with a tenant (`callers`).

May import: `service.api.problems` (to refuse), `service.api.dependencies` (the
service, as a route is handed it), `service.api.state`, `service.api.request_context`
(the caller's tenant, for the access log), `service.settings`.
"""
