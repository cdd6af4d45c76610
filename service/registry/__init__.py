"""The registry gates: MLflow's (POST /hooks/mlflow: verdicts as version tags) and an OCI registry's (POST /hooks/oci: as referrers),
and Harbor's scanner (/harbor/api/v1: a scan's findings as Harbor's vulnerability report).

May import: `service.imports`, `service.checks`, `service.store`, `service.tasks` (the
catalogue's format), `service.settings`, `service.background`, `service.errors` and `service.attestation` (the
service's version, which the Harbor scanner names; a bundle's Statement: which artifact it names, and
`onnx-import verify oci://`'s checks of it).
Never the web framework or `service.api` (the service's state included): it is
handed the pipeline's parts.
"""
