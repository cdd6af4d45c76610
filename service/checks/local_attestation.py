"""`onnx-import check --attest FILE --signing-key KEY`: one local model's check run, signed.

The attestation is the service's (`service.attestation`: a Sigstore bundle
over an in-toto Statement whose predicate is a SLSA Verification Summary),
signed with the caller's own key. Its subjects are the model file, named by
its file name, and each external data file it uses (a sandboxed worker
lists them, as for the service; the command hashes them), named relative to
the model's folder: external data kept elsewhere (`--external-data-dir`
outside that folder) cannot be named so, and is a usage error. Its
`resourceUri` is the model file's `file:` URI.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from service.checks.outcome import ChecksError
from service.checks.report import ModelChecks
from service.settings import Settings

if TYPE_CHECKING:
    from service.attestation.attester import Attester
    from service.attestation.statement import Subject
    from service.sandbox.protocol import WorkerJob
    from service.sandbox.supervisor import Sandbox


def local_attester(key: Path, settings: Settings) -> Attester:
    """The attester of `--signing-key KEY` (SettingsError when it cannot sign)."""
    from service.attestation.attester import attester_for, default_verifier_id

    return attester_for(key, None, default_verifier_id(""), settings)


def _sha256(path: str) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def model_subjects(sandbox: Sandbox, job: WorkerJob) -> list[Subject]:
    """The model file and the external files a sandboxed worker lists for it, each hashed here."""
    from service.attestation.statement import Subject

    model = os.path.join(job.directory, job.model)
    subjects = [Subject(job.model, _sha256(model), model=True)]
    listed = sandbox.run(replace(job, task="externals"), [], 0)
    if listed.status != "ok" or listed.header is None:  # refused: the check's result says why; its files are not read
        return subjects
    folder = job.external_dir or job.directory
    for location in listed.header.external_files:
        path = os.path.join(folder, location)
        name = os.path.relpath(path, job.directory)
        if name.startswith(".."):
            raise ChecksError(f"--attest names files relative to the model's folder: {location!r} is outside it (--external-data-dir)")
        if os.path.isfile(path):
            subjects.append(Subject(Path(name).as_posix(), _sha256(path)))
    return subjects


def write_attestation(attester: Attester, subjects: list[Subject], model: ModelChecks, path: Path, target: Path) -> None:
    """The signed attestation of `model`'s run on the files `subjects` name, written to `target`."""
    target.write_bytes(attester.attest(subjects, list(model.results), path.resolve().as_uri()))
