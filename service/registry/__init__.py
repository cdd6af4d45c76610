"""The MLflow registry gate (POST /hooks/mlflow): signed deliveries, models fetched through MLflow only, checks, verdicts written back.

May import: service.imports, service.checks, service.store, service.settings and service.errors. Never the web
framework or service.http (the service's state, service.http.state, included): it is handed the pipeline's parts.
"""
