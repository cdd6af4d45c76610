"""The worker's tasks: what a sandboxed worker does with its job once its walls are up.

Owns the dispatch (`dispatch`: a job's input opened, its task run, its
answer sent), and what the answers are built of: the tensor catalogue
(`catalog_builder`, in the format `catalog_format` the store reads), the
bounded summary (`bounded_summary`), the graph document (`graph_document`),
the comparison of two graph documents (`compare`) and the worker's profile
(`steps`). The check stages it runs are `service.checks.stages`.

May import: `importer`, `service.sandbox.protocol`, `service.checks`'s
vocabulary and stages, `service.tasks.model_diff`, `service.settings`. Never the
front end (`service.api`, `service.imports`, `service.store`, ...): the
fork server preloads it, and a worker holds nothing of the front end.
"""
