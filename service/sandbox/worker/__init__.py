"""What runs inside a forked worker: the entry point and what it builds.

Owns the entry (`main`), its confinement (`confinement`: namespaces, limits,
identity; `landlock`: the file policy; `seccomp`: the system-call filter),
its memory limit (`memory_limit`) and the builders of its answer: the tensor
catalogue (`catalog`), the bounded summary (`summary`) and the graph
document (`graph`).

May import: `importer`, `service.sandbox.protocol`, `service.settings`.
Never `service.http`, `service.imports`, `service.store` or `service.state`:
the fork server preloads this package, and a worker holds nothing of the
front end.
"""
