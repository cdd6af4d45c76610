"""The registry gates: MLflow's (POST /hooks/mlflow: verdicts as version tags) and an OCI registry's (POST /hooks/oci: as referrers).

May import: `service.imports`, `service.checks`, `service.store`, `service.tasks` (the
catalogue's format), `service.settings`, `service.background` and `service.errors`.
Never the web framework or `service.api` (the service's state included): it is
handed the pipeline's parts.
"""
