"""A check run's attestation, signed and kept for the tenant: `sign_run`.

The pipeline (`service.imports.pipeline`) calls it once the run's stages are
kept (a new import's commit, a model held again, a recheck), so every way a
check runs (an upload, resumable uploads, a data-root path or bucket, a
registry version, a recheck) leaves one. Where the service signs
(`--signing-key`, `ImportParts.attester`), the tenant's runs of the model as
they now stand (its verdict, `service.checks.runs`) are attested over the
files the worker read, by the digests the import computed (an upload's as
it arrived, a folder's by the worker), and the bundle replaces the tenant's
earlier one in the store's index (`Store.keep_attestation`), for
`GET /models/{id}/attestation`; its `timeVerified` is when the latest of
those runs began. Content a registry names anew (another version of the
same bytes, `Staged.resource_uri`) that the tenant holds with every stage
asked is attested again for that name, from the runs it holds, without a
worker (`sign_held`). Subjects are named relative to the model's
folder: the model file by its own name (`Staged.model_name`, else the
display name's last part), each external file by its location beside it.
The model is `Staged.resource_uri` (a registry's `models:/NAME/VERSION`),
else the service's `/models/ID` (under `--public-url` where set). A recheck
names the model as the tenant's earlier attestation did, where it has one
(a registry version's path and `models:/` URI are not in the store's record).
"""

from __future__ import annotations

import functools
import posixpath

import anyio.to_thread

from service.attestation.statement import MODEL_ROLE, Subject
from service.checks.runs import CheckRuns
from service.imports.parts import ImportParts
from service.imports.staging import Staged
from service.tasks.catalog_format import CONVERTED_FILE_KEY, MODEL_FILE_KEY


def model_uri(public_url: str, model_id: str) -> str:
    """The model as the service answers for it: `/models/ID`, under `--public-url` where set."""
    return f"{public_url.rstrip('/')}/models/{model_id}"


def subjects_of(staged: Staged, digests: dict[str, str]) -> list[Subject]:
    """The model's files by their names relative to its folder, each with its SHA-256 (`digests`: file key -> hex)."""
    model_name = staged.model_name or posixpath.basename(staged.display_name.rstrip("/")) or "model.onnx"
    beside = posixpath.dirname(model_name)
    subjects = [Subject(model_name, digests[MODEL_FILE_KEY], model=True)]
    for key, sha256 in sorted(digests.items()):
        if key not in (MODEL_FILE_KEY, CONVERTED_FILE_KEY):
            subjects.append(Subject(posixpath.join(beside, key), sha256))
    return subjects


def named_before(bundle: bytes | None) -> tuple[str, str]:
    """The model file's name and the resource URI of the tenant's earlier attestation ("" where it has none)."""
    from service.attestation.bundle import carried_statement

    statement = carried_statement(bundle) if bundle else {}
    subjects = statement.get("subject") or []
    names = [subject.get("name", "") for subject in subjects if isinstance(subject, dict) and subject.get("annotations") == MODEL_ROLE]
    predicate = statement.get("predicate") if isinstance(statement.get("predicate"), dict) else {}
    uri = predicate.get("resourceUri", "") if isinstance(predicate, dict) else ""
    return (names[0] if names and isinstance(names[0], str) else ""), (uri if isinstance(uri, str) else "")


async def sign_held(parts: ImportParts, tenant: str, model_id: str, staged: Staged) -> None:
    """Content held with every stage asked, answered without a worker: attested again where its source names the model
    (a registry version: the attestation must name that version) and staging knows every file's digest."""
    if parts.attester is not None and staged.resource_uri and MODEL_FILE_KEY in staged.digests:
        await sign_run(parts, tenant, model_id, staged, staged.digests)


async def sign_run(parts: ImportParts, tenant: str, model_id: str, staged: Staged, digests: dict[str, str]) -> None:
    """Sign the tenant's runs of the model over the files `digests` names, and keep the bundle (nothing without a key)."""
    attester = parts.attester
    if attester is None:
        return
    runs = CheckRuns.from_bytes(await anyio.to_thread.run_sync(parts.store.checks, tenant, model_id))
    if runs is None:
        return
    if staged.record is not None and not (staged.model_name and staged.resource_uri):  # a recheck: named as the import named it
        earlier_name, earlier_uri = named_before(await anyio.to_thread.run_sync(parts.store.attestation, tenant, model_id))
        staged.model_name, staged.resource_uri = staged.model_name or earlier_name, staged.resource_uri or earlier_uri
    uri = staged.resource_uri or model_uri(parts.settings.public_url, model_id)
    signing = functools.partial(attester.attest, subjects_of(staged, digests), runs.results(), uri, runs.verified_at())
    bundle = await anyio.to_thread.run_sync(signing)  # it reads --trusted-signers: off the event loop
    await anyio.to_thread.run_sync(parts.store.keep_attestation, tenant, model_id, bundle)
