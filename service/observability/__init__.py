"""What the service tells its operators: metrics, the request log, the log
format and the readiness check.

May import: `service.store`, `service.sandbox` (readiness), `service.imports.admission`
(metrics), `service.api.request_context`, `service.background` (readiness of
what runs beside the requests), `service.errors`. Never `service.api.routes`.
"""
