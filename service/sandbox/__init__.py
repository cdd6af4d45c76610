"""The worker sandbox: one fresh, confined, limited process per job; the jail, not what runs in it.

Owns the supervisor (`supervisor`: the fork server, running a job, receiving
its streams, classifying how it ended as typed errors), the protocol between
supervisor and worker (`protocol`), the front end's memory watch
(`memory_watch`), the worker's cgroups (`cgroups`), a check worker's memory
cap sized to its model (`memory_sizing`), and `worker/`: the
worker's entry and its walls (namespaces, minimal root, privileges,
Landlock, seccomp, limits). What a worker does once walled is
`service.tasks`; the check stages it runs are `service.checks.stages`.

May import: `importer`, `service.settings`, `service.errors` (typed errors,
a full disk), `service.checks`'s vocabulary, `service.tasks` (the worker's
entry runs them). Never `service.api`, `service.imports` or `service.store`.
"""
