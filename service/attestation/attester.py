"""What signs a check run's attestation: `Attester`, and `load_attester(settings)` at the service's start.

The service's front end reads `--signing-key` once, as its app starts
(`service.app`; with several front ends, each front-end process reads it
at its start, as each reads the report links' key file), and keeps it in
its `Attester` only. The workers never receive it: their fork server is a
fresh interpreter the front end execs before any request (multiprocessing's
forkserver; `service.sandbox.supervisor`), and a job carries the model's
files, never the service's keys. The key's fingerprint, and those of the
`--verify-keys` still in force (rotation), are what `/readyz` shows. The
settings its attestations' policy names (`statement.verdict_settings`) are
taken then too, once; but for `--trusted-signers`, named by the fingerprints
of what it holds, read again for each attestation as the signature stage
reads it again for each check (a file replaced takes effect in both, so an
attestation never names a trust its stage did not run under).

`load_attester` raises `SettingsError` naming the file (never a byte of
the key) when it cannot sign, and naming the `signing` extra when its
libraries are not installed.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from service.attestation.statement import CheckedRun, Subject, statement_of, verdict_settings
from service.checks.outcome import StageResult
from service.checks.signature_worker import trusted_signers_text
from service.settings import Settings
from service.settings.kinds import SettingsError

if TYPE_CHECKING:  # cryptography is the signing extra's: imported once a key is read
    from service.attestation.signing_keys import PublicKey, SigningKey

EXTRA_MISSING = (
    "--signing-key needs the signing extra (model-signing, sigstore-models, cryptography): pip install 'onnx-import-service[signing]'"
)


@dataclass(frozen=True)
class Attester:
    key: SigningKey
    verify_keys: Sequence[PublicKey]  # older keys whose attestations still verify (rotation)
    verifier_id: str
    settings: Mapping[str, object]  # the settings' values, taken at start (`verdict_settings` picks and adds the trust)
    trusted_signers: Path | None = None  # --trusted-signers, read for each attestation

    @property
    def verify_fingerprints(self) -> list[str]:
        from service.attestation.signing_keys import fingerprint

        return [fingerprint(key) for key in self.verify_keys]

    def attest(
        self, subjects: Sequence[Subject], results: Sequence[StageResult], resource_uri: str, time_verified: datetime | None = None
    ) -> bytes:
        """The signed bundle of a check run: `results` on the files `subjects` name, the model at `resource_uri`,
        verified at `time_verified` (when its latest stage ran; default now)."""
        from service.attestation.bundle import signed_bundle

        settings = verdict_settings(self.settings, self.trust())
        run = CheckedRun(subjects, results, resource_uri, settings, time_verified or datetime.now(UTC))
        return signed_bundle(statement_of(run, self.verifier_id), self.key)


    def trust(self) -> dict[str, list[str]]:
        """The fingerprints of what --trusted-signers holds now (`signing_keys.trusted_signer_fingerprints`); none where
        it cannot be read now (the signature stage, reading it too, then trusts no one either)."""
        from service.attestation.signing_keys import trusted_signer_fingerprints

        try:
            return trusted_signer_fingerprints(trusted_signers_text(self.trusted_signers))
        except OSError:
            return trusted_signer_fingerprints("")


def default_verifier_id(public_url: str) -> str:
    """The service's identity where `--verifier-id` names none: its public URL, else onnx-import-service@HOST."""
    return public_url.rstrip("/") or f"onnx-import-service@{socket.gethostname()}"


def attester_for(key_file: Path, verify_keys_file: Path | None, verifier_id: str, settings: Settings) -> Attester:
    """An attester signing with the key in `key_file` (read here, once); SettingsError when it cannot."""
    try:
        import model_signing._signing.sign_sigstore_pb  # noqa: F401
        import sigstore_models.bundle.v1  # noqa: F401

        from service.attestation.signing_keys import KeyProblem, SigningKey, public_keys_in
    except ImportError:
        raise SettingsError(EXTRA_MISSING) from None
    try:
        key = SigningKey.from_file(key_file)
    except KeyProblem as error:
        raise SettingsError(f"--signing-key {error}") from None
    try:
        older = public_keys_in(verify_keys_file) if verify_keys_file is not None else []
    except KeyProblem as error:
        raise SettingsError(f"--verify-keys {error}") from None
    try:
        trusted_signers_text(settings.trusted_signers)
    except OSError as error:
        raise SettingsError(f"--trusted-signers {settings.trusted_signers}: cannot be read ({error.strerror})") from None
    values = {name: getattr(settings, name) for name in settings.__dataclass_fields__}
    return Attester(key, older, verifier_id, values, settings.trusted_signers)


def load_attester(settings: Settings) -> Attester | None:
    """The service's attester (`--signing-key`), or None where it signs nothing."""
    if settings.signing_key is None:
        return None
    verifier = settings.verifier_id or default_verifier_id(settings.public_url)
    return attester_for(settings.signing_key, settings.verify_keys, verifier, settings)
