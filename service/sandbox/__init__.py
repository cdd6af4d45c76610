"""The worker sandbox: one fresh, confined, limited process per job.

Owns the supervisor (`supervisor`: the fork server, running a job, receiving
its streams, classifying how it ended as typed errors), the protocol between
supervisor and worker (`protocol`), the front end's memory watch
(`memory_watch`), and `worker/`, everything that runs inside the fork.

Also `check_run`: a check worker's run as stage results. May import:
`importer`, `service.settings`, `service.errors` (typed errors, a full disk),
`service.checks` (the stages' vocabulary). Never `service.http`, `service.imports` or `service.store`.
"""
