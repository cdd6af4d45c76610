"""What runs inside a forked worker: the entry point and what it builds.

Owns the entry (`main`), its confinement (`confinement`, which puts up in
order: `namespaces`, prepared in the fork server by `fork_server`;
`minimal_root`; `privileges`; `landlock`, the file policy; `seccomp`, the
system-call allow-list), its memory limit (`memory_limit`), how it gets its
external data files opened (`file_broker`) and the builders of its answer:
the tensor catalogue (`catalog`), the bounded summary (`summary`) and the
graph document (`graph`).

May import: `importer`, `service.sandbox.protocol`, `service.settings`.
Never `service.http`, `service.imports`, `service.store` or `service.state`:
the fork server preloads this package, and a worker holds nothing of the
front end.
"""
