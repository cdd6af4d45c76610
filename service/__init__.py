"""The ONNX import service: a FastAPI front end over sandboxed import workers.

See `service.app` for the routes and the import flow, `service.sandbox` and
`service.worker` for the workers, `service.store` for the store. Run it with
`python -m service`.
"""
