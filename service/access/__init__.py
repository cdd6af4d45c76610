"""Who may call: API keys, their scopes and tenants.

Owns the key file and its reload (`keys`) and the FastAPI dependencies that
turn a request's credentials into a caller with a tenant (`callers`).

May import: `service.http.problems` (to refuse), `service.http.dependencies` (the
service, as a route is handed it), `service.http.state`, the settings.
"""
