"""The in-toto Statement of a check run: `Subject`, `CheckedRun`, `statement_of`, `VERDICT_SETTINGS`, `verdict_settings`.

The Statement (`https://in-toto.io/Statement/v1`) names every file of the
model as a subject: its name relative to the model's folder, `/`-separated,
as model-signing names a folder's files (the model file, annotated
`{"onnx_import.role": "model"}`, and each external data file by the location
the model gives it), and its SHA-256 (digests the import computed already:
the worker's, or an upload's as it arrived). Its predicate is a SLSA
Verification Summary v1 (`https://slsa.dev/verification_summary/v1`):

- `verifier`: `id` (`--verifier-id`) and `version` (`{"onnx-import-service": VERSION}`);
- `timeVerified`: RFC 3339, UTC;
- `resourceUri`: the model as the caller reaches it (the service's
  `/models/ID`, a registry's `models:/NAME/VERSION`, a local file's URI);
- `policy`: `uri` (`POLICY_URI`) and `digest.sha256`, the SHA-256 of the
  policy document, which is in the predicate too as `onnxImportPolicy`
  (its canonical JSON: keys sorted, no spaces): the stages run, each with its
  status, the versions of the code it ran and the smoke run's dimension
  bindings; the onnx and onnxruntime versions; the settings that decide a
  verdict (`VERDICT_SETTINGS`, and `--trusted-signers` as `TRUSTED_SIGNERS`:
  the fingerprints of the keys and certificates it holds, as the service read
  it at its start, not its path) and their SHA-256;
- `verificationResult`: `PASSED` when the verdict is pass, else `FAILED`
  (a fail, and an incomplete verdict too);
- `verifiedLevels`: one per stage, `ONNX_IMPORT_STAGE_<STAGE>_<STATUS>`
  (`ONNX_IMPORT_STAGE_SMOKE_PASS`);
- `inputAttestations`: the model's own signature where the `signature` stage
  checked one (its level says whether it verified): `{"uri": "model.sig", "digest": {"sha256": ...}}`, read from
  that stage's `signature_sha256` (and its `signer_fingerprint`, kept in the
  policy document).

The Statement is checked with in-toto-attestation's own `Statement.validate`
and written as compact JSON (integers stay integers, which protobuf's JSON
would make floats).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from service.checks.outcome import StageResult, verdict
from service.checks.runs import SERVICE_DISTRIBUTION, code_versions

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE: Final = "https://slsa.dev/verification_summary/v1"
POLICY_URI: Final = "https://onnx-import.example/policy/checks/v1"
MODEL_ROLE: Final = {"onnx_import.role": "model"}
SIGNATURE_URI: Final = "model.sig"  # the model's own OpenSSF signature, as model_signing writes it
PASSED: Final = "PASSED"
FAILED: Final = "FAILED"
# The settings that decide a verdict (what a stage finds, whether it finishes): their values
# are in the policy document, and its digest changes when one of them does.
VERDICT_SETTINGS: Final = (
    "max_static_output",
    "max_inlined_nodes",
    "max_loop_trips",
    "max_tensor_bytes",
    "max_external_files",
    "smoke_cpu_seconds",
    "smoke_second_dim",
    "worker_memory",
    "worker_memory_per_model_byte",
    "worker_memory_share",
    "worker_cpu_seconds",
    "worker_timeout",
    "require_signature",  # the signature stage: a model without a model.sig fails rather than skips
)
# The settings' entry of --trusted-signers, which decides the signature stage's verdict: not its path but what it
# trusts, `{"keys": [...], "certificates": [...]}`, each the SHA-256 of a key's SubjectPublicKeyInfo (DER), sorted.
TRUSTED_SIGNERS: Final = "trusted_signers"
RUNTIME_DISTRIBUTIONS: Final = ("onnx", "onnxruntime")


@dataclass(frozen=True, slots=True)
class Subject:
    """A file of the model: its name relative to the model's folder, and its SHA-256 (hex)."""

    name: str
    sha256: str
    model: bool = False  # the model file itself (the others: its external data)


@dataclass(frozen=True, slots=True)
class CheckedRun:
    """What one attestation says: the files, the stages' results, where the model is, what decided."""

    subjects: Sequence[Subject]
    results: Sequence[StageResult]
    resource_uri: str
    settings: Mapping[str, object]  # VERDICT_SETTINGS' values, as the run had them
    time_verified: datetime = field(default_factory=lambda: datetime.now(UTC))


def canonical_json(document: object) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def verdict_settings(values: Mapping[str, object], trusted_signers: Mapping[str, Sequence[str]]) -> dict[str, object]:
    """`VERDICT_SETTINGS`' values out of a run's settings (a `Settings`' fields, by name), and the fingerprints of
    the trusted signers (`signing_keys.trusted_signer_fingerprints`) as `TRUSTED_SIGNERS`."""
    settings: dict[str, object] = {name: values[name] for name in VERDICT_SETTINGS}
    settings[TRUSTED_SIGNERS] = {kind: list(prints) for kind, prints in trusted_signers.items()}
    return settings


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ""


def service_version() -> str:
    return _version(SERVICE_DISTRIBUTION)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def verified_level(result: StageResult) -> str:
    return f"ONNX_IMPORT_STAGE_{result.stage.upper()}_{result.status.upper()}"


def _stage_entry(result: StageResult) -> dict[str, object]:
    entry: dict[str, object] = {"status": result.status, "versions": code_versions(result.stage)}
    if result.bindings:
        entry["bindings"] = [dict(run) for run in result.bindings]
        entry["binding_sources"] = dict(result.binding_sources)
    signer = getattr(result, "signer_fingerprint", "")  # the signature stage's, where there is one
    if isinstance(signer, str) and signer:
        entry["signer_fingerprint"] = signer
    return entry


def policy_document(run: CheckedRun) -> dict[str, object]:
    """What decided the verdict (see the module comment)."""
    settings = {name: run.settings[name] for name in sorted(run.settings)}
    return {
        "stages": {result.stage: _stage_entry(result) for result in run.results},
        "versions": {name: _version(name) for name in RUNTIME_DISTRIBUTIONS},
        "settings": settings,
        "settings_sha256": hashlib.sha256(canonical_json(settings)).hexdigest(),
    }


def input_attestations(results: Sequence[StageResult]) -> list[dict[str, object]]:
    """The model's own signature, where the signature stage checked one (its `signature_sha256`)."""
    found: list[dict[str, object]] = []
    for result in results:
        digest = getattr(result, "signature_sha256", "")
        if isinstance(digest, str) and digest:
            found.append({"uri": SIGNATURE_URI, "digest": {"sha256": digest}})
    return found


def predicate_of(run: CheckedRun, verifier_id: str) -> dict[str, Any]:
    policy = policy_document(run)
    predicate: dict[str, Any] = {
        "verifier": {"id": verifier_id, "version": {SERVICE_DISTRIBUTION: service_version()}},
        "timeVerified": rfc3339(run.time_verified),
        "resourceUri": run.resource_uri,
        "policy": {"uri": POLICY_URI, "digest": {"sha256": hashlib.sha256(canonical_json(policy)).hexdigest()}},
        "verificationResult": PASSED if run.results and verdict(run.results) == "pass" else FAILED,
        "verifiedLevels": [verified_level(result) for result in run.results],
        "onnxImportPolicy": policy,
    }
    inputs = input_attestations(run.results)
    if inputs:
        predicate["inputAttestations"] = inputs
    return predicate


def statement_of(run: CheckedRun, verifier_id: str) -> bytes:
    """The Statement's JSON (the DSSE payload), checked by in-toto-attestation's `Statement.validate`."""
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
    from in_toto_attestation.v1.statement import Statement

    subjects = []
    for subject in sorted(run.subjects, key=lambda item: (not item.model, item.name)):
        entry: dict[str, Any] = {"name": subject.name, "digest": {"sha256": subject.sha256}}
        if subject.model:
            entry["annotations"] = dict(MODEL_ROLE)
        subjects.append(entry)
    predicate = predicate_of(run, verifier_id)
    descriptors = [
        ResourceDescriptor(name=item["name"], digest=item["digest"], annotations=item.get("annotations")).pb for item in subjects
    ]
    Statement(descriptors, PREDICATE_TYPE, predicate).validate()  # in-toto's rules: subjects with digests, a predicate
    return canonical_json({"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": PREDICATE_TYPE, "predicate": predicate})
