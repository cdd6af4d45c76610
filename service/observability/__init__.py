"""What the service tells its operators: metrics, the request log, the log
format and the readiness check.

May import: `service.store`, `service.sandbox` (readiness), `service.imports.limiter`
(metrics), `service.http.request_context`. Never the routes.
"""
