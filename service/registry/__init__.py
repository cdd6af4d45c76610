"""The MLflow registry gate (POST /hooks/mlflow): signed deliveries, models fetched through MLflow only, checks, verdicts written back.

May import service.imports, service.checks, service.state, service.settings and service.errors; never the web framework or service.http.
"""
