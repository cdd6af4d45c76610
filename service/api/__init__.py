"""The HTTP face of the service: everything that knows FastAPI, Starlette or h11.

Owns the one map from domain errors to RFC 9457 problems (`problems`), the
connection protocol and middleware (`protocol`), request bodies and uploads,
tensor responses (Range, ETag, .npy), the API's schemas, paging, the OpenAPI
document, the dependencies that hand a route the service (`dependencies`),
and the routes (`routes/`). Routes parse, call a use case
(`service.imports`) or the store, and render.

May import: `service.imports`, `service.store`, `service.access`,
`service.observability`, `service.sandbox` (its protocol and supervisor's
status only), `service.settings`, `service.tasks` (the catalogue's format),
`service.errors`. Never `service.server`: the app runs on any ASGI server.
Nothing below it imports it back (`tests/test_layering.py`).
"""
