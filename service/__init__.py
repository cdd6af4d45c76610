"""The ONNX import service: a FastAPI app over sandboxed import workers.

A folder per concern, each opening with what it owns and what it may import
(`tests/test_layering.py` holds them to it): `server/` (the web server:
uvicorn, h11, the front-end processes), `api/` (the app's routes, schemas,
problems, request bodies, tensor responses), `imports/` (the one import
pipeline and its sources, without HTTP), `checks/` (the stages, their runs,
the per-tenant records, the reports), `tasks/` (what a worker does once its
walls are up), `sandbox/` (the jail: supervisor, protocol, confinement, fork
server), `store/` (bytes and one SQL index, and their backends), `registry/`
(the MLflow gate), `access/` (keys and tenants), `observability/` (metrics,
logs, readiness), `settings/`, `client/` and `ui/`. At the root: the app
factory (`app`), the entry point (`__main__`), the domain errors (`errors`)
and the tasks beside the requests (`background`). Run it with
`python -m service`.
"""
