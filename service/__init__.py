"""The ONNX import service: a FastAPI front end over sandboxed import workers.

A folder per concern, each opening with what it owns and what it may import:
`http/` (routes, problems, uploads, tensor responses), `imports/` (the import
use case, without HTTP), `store/` (content and index behind one interface,
and its backends), `sandbox/` (the supervisor; `worker/` is what runs in the
fork), `access/` (keys and tenants), `observability/` (metrics, logs,
readiness), `client/` and `ui/`. At the root: the app factory (`app`), the
settings, the parts as routes reach them (`state`), the domain errors
(`errors`) and data-root path confinement (`paths`). Run it with
`python -m service`.
"""
