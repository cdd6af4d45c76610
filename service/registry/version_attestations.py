"""A version's attestations, logged beside its artifacts in MLflow: `attestation_folder`, `version_attestations`.

Where the service signs (`--signing-key`), each model of a version the gate
imported has an attestation (`service.imports.attesting`: the tenant's
latest for that model, the bytes `GET /models/{id}/attestation` answers;
a model that failed has one too, FAILED). The gate logs each through
MLflow's artifact proxy, in a folder beside the version's folder, never in
it (a file added there would change the folder a model signature covers,
and `mlflow.onnx.load_model` would download it with the model):

    <folder>.onnx-import/<NAME>/v<VERSION>/<MODEL PATH>.sigstore.json

(`runs:/RUN/model` of experiment 0: `0/RUN/artifacts/model.onnx-import/
fraud/v3/model.onnx.sigstore.json`). The sibling of the folder, not the
run's artifact root: a version's source is a run's folder or a logged
model's (`models:/m-ID`, with no run of its own to log to), and the sibling
is beside either, so `mlflow artifacts list` shows it next to the model.
The registered model's name and the version are in the path because one
folder can be the source of several versions (registered again, or under
another name), each with its own attestation (its `resourceUri` names the
version); each model of the version is named by its path in the folder,
so several models (an encoder, a decoder) are kept apart. A name's
characters other than letters, digits, `.`, `_` and `-` are replaced by
`_`, and the name is then followed by `-` and 12 hex digits of its SHA-256
(two names never share a folder; MLflow's proxy decodes `%` and refuses `#`).

The version's tag `onnx_import.attestation` says where: the attestation's
URI (`mlflow-artifacts:/...`, which `mlflow artifacts download -u` takes)
for a version of one model, the folder's for several (a file per model).
A version read from the service's own bucket (`service.registry.folders.
BucketFolder`) is not beside a folder of the proxy: nothing is logged and
the tag says so, as it does when the attestations cannot be read (the
index away) or one is past `MAX_UPLOAD` (1 MiB: a model naming several
thousand external files): the verdict is written all the same. What is written is part of the verdict's write-back
(`service.registry.pending.WriteBack.artifacts`): the files before the
tags, kept and written later with them when MLflow is down.
"""

from __future__ import annotations

import hashlib
import logging
import re

import anyio.to_thread

from service.errors import DomainError, bounded
from service.imports.parts import ImportParts
from service.registry.folders import ProxyFolder
from service.registry.mlflow_api import MAX_UPLOAD
from service.registry.verdict import ATTESTATION, MAX_REASON, FileVerdict
from service.registry.version_source import VersionFiles

log = logging.getLogger("service")

SIBLING = ".onnx-import"  # the folder beside the version's: <folder>.onnx-import
SUFFIX = ".sigstore.json"  # a model's attestation: <its path>.sigstore.json
URI_SCHEME = "mlflow-artifacts:/"
MAX_SEGMENT = 100  # characters of a name's segment in the path
UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def path_segment(name: str) -> str:
    """`name` as one path segment the proxy takes as it is: unchanged if it is letters, digits, `.`, `_`, `-` (and not
    `.` or `..`), else those kept, others `_`, followed by `-` and 12 hex digits of its SHA-256."""
    safe = UNSAFE.sub("_", name)[:MAX_SEGMENT]
    if safe == name and name not in ("", ".", ".."):
        return name
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def attestation_folder(folder: str, name: str, version: str) -> str:
    """The proxy path of version `version` of `name`'s attestations, for the version's folder at proxy path `folder`."""
    return f"{folder.rstrip('/')}{SIBLING}/{path_segment(name)}/v{path_segment(version)}"


Logged = tuple[dict[str, str], dict[str, str]]  # the files to log (proxy path -> bundle) and the attestation tag


async def version_attestations(parts: ImportParts, files: VersionFiles, checked: list[FileVerdict]) -> Logged:
    """The files to log and the tag of a version whose files are `checked` (none without a key, or an attestation)."""
    if parts.attester is None:
        return {}, {}
    try:
        bundles = await _bundles(parts, checked)
    except DomainError as error:  # the index does not answer: the verdict is still written, without them
        log.warning("mlflow: the attestations of %s version %s are not logged: %s", files.name, files.version, error.detail)
        return {}, {ATTESTATION: bounded(f"not logged: {type(error).__name__}: {error.detail}", MAX_REASON)}
    except Exception as error:  # a bug of ours: the same
        log.exception("mlflow: reading the attestations of %s version %s broke", files.name, files.version)
        return {}, {ATTESTATION: f"not logged: internal error: {type(error).__name__}"}
    if not bundles:
        return {}, {}
    large = [path for path, bundle in bundles.items() if len(bundle.encode()) > MAX_UPLOAD]
    if large:  # subjects by the thousand (a model naming that many external files)
        said = f"not logged: the attestation of {large[0][:200]} has more than the {MAX_UPLOAD} bytes the gate writes to MLflow"
        return {}, {ATTESTATION: bounded(said, MAX_REASON)}
    if not isinstance(files.folder, ProxyFolder):
        said = f"not logged: the version's artifacts are in {files.folder.where[:200]}, which the service only reads"
        return {}, {ATTESTATION: bounded(said, MAX_REASON)}
    folder = attestation_folder(files.folder.path, files.name, files.version)
    logged = {f"{folder}/{path}{SUFFIX}": bundle for path, bundle in bundles.items()}
    where = next(iter(logged)) if len(files.paths) == 1 else folder
    return logged, {ATTESTATION: URI_SCHEME + where}


async def _bundles(parts: ImportParts, checked: list[FileVerdict]) -> dict[str, str]:
    """Each imported file's attestation (the tenant's latest for its model), by the file's path."""
    bundles = {}
    for file in checked:
        if file.model_id:
            bundle = await anyio.to_thread.run_sync(parts.store.attestation, parts.settings.mlflow_tenant, file.model_id)
            if bundle is not None:
                bundles[file.file] = bundle.decode()
    return bundles
