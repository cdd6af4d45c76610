"""What runs inside a forked worker before its task: the entry point and the walls.

Owns the entry (`main`), its confinement (`confinement`, which puts up in
order: `namespaces`, prepared in the fork server by `fork_server`;
`minimal_root`; `privileges`; `landlock`, the file policy; `seccomp`, the
system-call allow-list), its memory limit (`memory_limit`), its death with
the fork server (`lifeline`) and how it gets its external data files opened
(`file_broker`), and, in a check worker, the model's own files bound for
onnxruntime to open by name (`bound_files`). The task itself is `service.tasks`.

May import: `importer`, `service.sandbox.protocol`, `service.tasks`,
`service.checks.stages` (a stage's CPU budget, armed before the walls), `service.settings`. Never `service.api`, `service.imports`,
`service.store` or `service.api.state`: the fork server preloads this package,
and a worker holds nothing of the front end.
"""
