"""The ONNX import service: a FastAPI front end over sandboxed import workers.

See `service.app` for how the parts are assembled, `service.routes` for the
routes, `service.import_flow` for an import, `service.sandbox`,
`service.confinement` and `service.worker` for the workers, `service.store`
for the store. Run it with `python -m service`.
"""
