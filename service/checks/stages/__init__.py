"""The check stages, as they run inside a sandboxed worker.

Each stage is a function of the opened model (`importer.OnnxModel`) that
returns a `service.checks.outcome.StageResult`, never raises for anything a
model can hold, and places each finding at a node, a field path and a byte
offset as the operator check does:

- `security.security_stage(model, bounds)`: our own code over the resolved
  graph (outputs whose size constants fix, past `--max-static-output`;
  calls of model-local functions that would inline past `--max-inlined-nodes`;
  `Loop`s whose constant trip count is past `--max-loop-trips`;
  external-data locations with onnxruntime's memory-address marker; custom
  domains and Python-callback ops; control and bidirectional-override
  characters; declared dimensions past a bound). Runs in the import's worker.
- `shape.shape_stage(model)`: onnx's strict type and shape inference, every
  conflict and error placed at its node.
- `runtime.runtime_stage(model)`: an onnxruntime session made from the
  model's bytes, every external initializer given from the importer's own
  memory, so onnxruntime opens no file.
- `smoke.smoke_stage(session, model, dims)`: a run on synthetic inputs,
  its dimensions bound by `dims`, the model's metadata and a registry's
  `soft_dims` as `dim_bindings` places them (a binding of `dims` the model
  has no place for is the request's error, DimensionBindingError, which
  `in_worker` reports before any stage), and a second run with those left
  unbound at `--smoke-second-dim`; each stopped past its CPU budget
  (`--smoke-cpu-seconds`, `cpu_budget`).

- `model_signature.signature_stage(job, opener)`: the model folder's OpenSSF
  model signature (`model.sig`) verified by model-signing (the `signing`
  extra) against the trusted signers the job carries, and each file of the
  folder, opened by the file broker, against the digests it signs. Reads no
  model: a signature worker of its own; without the extra, `incomplete`.

The shape, runtime and smoke stages import onnx or onnxruntime (the `runtime` extra) and run in a
check worker of their own (`in_worker`), so that a crash or a limit there makes the
stage `incomplete` and leaves the import whole; without the extra they are
`incomplete`, saying which package is missing.

May import: `importer`, `service.checks.outcome` (the findings' vocabulary),
`service.sandbox.protocol`, `service.tasks.steps`, onnx and onnxruntime
inside the stages that run them, and model-signing and cryptography (the
signature stage). Never the front end (`service.api`,
`service.imports`, `service.store`): it runs in the fork.
"""
