"""The HTTP routes, one router per resource: models, tensors, diagnostics,
health (and metrics), and ui (the explorer and the API docs).

A route parses the request, calls the use case (`service.imports`) or the
store, and renders; it never touches a store path (`tests/test_layering.py`).

May import: `service.api`, `service.imports`, `service.store`, `service.checks`,
`service.registry` (the webhook's gate), `service.access`, `service.observability`,
`service.sandbox` (the supervisor's status, for readiness),
`service.settings`, `service.errors`, `service.tasks` (the catalogue's format,
the graph document's shape), `service.attestation` (the bundle's media type).
Never `service.server`.
"""
