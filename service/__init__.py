"""The ONNX import service: a FastAPI front end over sandboxed import workers.

See `service.app` for how the parts are assembled, `service.http.routes` for the
routes, `service.imports.flow` for an import, `service.sandbox.supervisor`,
`service.sandbox.worker.confinement` and `service.sandbox.worker.main` for the workers, `service.store.model_store`
for the store. Run it with `python -m service`.
"""
