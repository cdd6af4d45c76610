"""The MLflow registry gate (POST /hooks/mlflow): signed deliveries, models fetched through MLflow only, checks, verdicts written back.

May import: `service.imports`, `service.checks`, `service.store`, `service.tasks` (the
catalogue's format), `service.settings`, `service.background` and `service.errors`.
Never the web framework or `service.api` (the service's state included): it is
handed the pipeline's parts.
"""
