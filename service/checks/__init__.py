"""Check stages: what a registry needs to accept or refuse a model version.

Owns the vocabulary every side shares (`outcome`: stages, statuses,
`Finding`, `StageResult`, the verdict) and the reports made from it (`sarif`,
`junit`). The stages themselves run inside a sandboxed worker
(`service.sandbox.worker.checks`); `command` is the `onnx-import` console
script, which runs them in the same worker without a server.

May import: `importer`, `service.settings`, `service.errors`, `service.sandbox`
(the command only). Never `service.http`, `service.imports` or `service.store`.
"""
