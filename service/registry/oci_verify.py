"""`onnx-import verify oci://REGISTRY/REPOSITORY@DIGEST --public-key FILE...`: an OCI artifact checked where it is deployed.

The artifact and its verdict referrer are pulled from the registry the
reference names (HTTPS, or HTTP with `--plain-http`), with the credentials of
a Docker `config.json` as the OCI gate reads `--oci-credentials`
(`service.registry.oci_api.credentials_headers`: `--credentials FILE`, else
`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`, where there is
one). In order, each step refusing the artifact (exit 1, what failed on
standard error) when it fails:

1. the manifest, by its digest (its bytes checked against it): an ONNX
   artifact as the gate takes one (`service.registry.oci_artifact.onnx_layers`);
2. its verdict referrer, by the referrers API, else the referrers tag schema
   (`sha256-<hex>`; `service.registry.oci_verdict.referrers_of`): the newest
   signed one (artifact type `application/vnd.dev.sigstore.bundle.v0.3+json`,
   by its `org.opencontainers.image.created`); none, or only the unsigned
   verdict JSON, refuses;
3. each of its layers a bundle one of the public keys signed
   (`service.attestation.bundle.verified_statement`), whose resourceUri names
   this artifact's digest (the registry's host and the repository may differ:
   an artifact copied with its referrers keeps its digest), and whose result
   is PASSED;
4. the artifact's layers, pulled and unpacked as the gate pulls them
   (`service.registry.oci_pull.pull_tree`: the same confinement of paths,
   within `--max-upload-total` and `--max-external-files`), into a work folder;
5. each subject's SHA-256 against the pulled file of that path
   (`service.attestation.folder_check`), and every `.onnx` file of the
   artifact the model subject of a bundle (a model the gate did not import
   has none).

Files of the artifact that no model names (a README, a config) are neither
attested nor checked. With `--output DIR`, once everything verified, the
attested files (every subject, nothing else) are moved into DIR as the
artifact lays them out; the work folder is then inside DIR (an init
container's emptyDir: the root may be read-only) and removed, and DIR holds
nothing when a check fails. Without it, the work folder is a temporary one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from service.attestation.folder_check import folder_findings
from service.attestation.statement import MODEL_ROLE
from service.attestation.verify_command import EXIT_REFUSED, EXIT_USAGE, EXIT_VERIFIED, OCI_SCHEME, result_findings
from service.errors import BadInput, UploadTooLarge
from service.registry.oci_api import MAX_MANIFEST, OCI_MANIFEST, OciRefused, OciRegistry, OciUnavailable, TooLarge, valid_reference
from service.registry.oci_artifact import SIGSTORE_BUNDLE, VERDICT_ANNOTATION, VERDICT_JSON, onnx_layers
from service.registry.oci_pull import ArtifactTree, pull_tree
from service.registry.oci_verdict import referrers_of
from service.registry.sources import MAX_MODEL_FILES, Refused
from service.settings import Settings
from service.settings.kinds import SettingsError, parse_size

if TYPE_CHECKING:
    from service.attestation.signing_keys import PublicKey

CREATED = "org.opencontainers.image.created"


@dataclass(frozen=True, slots=True)
class ArtifactReference:
    registry: str  # HOST[:PORT]
    repository: str
    digest: str

    def __str__(self) -> str:
        return f"{OCI_SCHEME}{self.registry}/{self.repository}@{self.digest}"


class Failed(Exception):
    """The artifact is refused: each line of `findings` says what failed."""

    def __init__(self, *findings: str) -> None:
        super().__init__("; ".join(findings))
        self.findings = list(findings)


def parse_reference(text: str) -> ArtifactReference:
    """`oci://REGISTRY/REPOSITORY@DIGEST` (a SHA-256 digest, never a tag: a tag can be moved); ValueError saying why not."""
    rest = text.removeprefix(OCI_SCHEME)
    place, at, digest = rest.rpartition("@")
    registry, slash, repository = place.partition("/")
    if not at or not slash or not registry or any(char in registry for char in "@?#\\ "):
        raise ValueError(f"{text!r} is not {OCI_SCHEME}REGISTRY/REPOSITORY@sha256:HEX (a digest, not a tag)")
    if not valid_reference(repository, digest):
        raise ValueError(f"{text!r}: the repository or the digest (sha256:HEX, 64 hex digits) is malformed")
    return ArtifactReference(registry, repository, digest)


def credentials_file(given: Path | None, environ: dict[str, str]) -> Path | None:
    """`--credentials`, else the Docker config Docker's own client would read, where there is one."""
    if given is not None:
        return given
    folder = Path(environ["DOCKER_CONFIG"]) if environ.get("DOCKER_CONFIG") else Path.home() / ".docker"
    found = folder / "config.json"
    return found if found.is_file() else None


def _newest_signed(referrers: list[dict[str, Any]], reference: ArtifactReference) -> dict[str, Any]:
    signed = [entry for entry in referrers if entry.get("artifactType") == SIGSTORE_BUNDLE]
    if signed:

        def created(entry: dict[str, Any]) -> str:
            annotations = entry.get("annotations")
            value = annotations.get(CREATED, "") if isinstance(annotations, dict) else ""
            return value if isinstance(value, str) else ""

        return max(enumerate(signed), key=lambda item: (created(item[1]), item[0]))[1]  # the newest; the last listed of a tie
    unsigned = [entry for entry in referrers if entry.get("artifactType") == VERDICT_JSON]
    if unsigned:
        annotations = unsigned[-1].get("annotations")
        said = annotations.get(VERDICT_ANNOTATION, "?") if isinstance(annotations, dict) else "?"
        raise Failed(f"the verdict referrer of {reference} is not signed (its verdict: {said}): the service had no signing key, "
                     "or imported no model of the artifact")  # fmt: skip
    raise Failed(f"no verdict referrer: {reference} has not been validated (or not yet)")


def _verified_bundles(bundles: list[bytes], keys: list[PublicKey], reference: ArtifactReference) -> list[tuple[dict[str, Any], str]]:
    """Each bundle's Statement and signer, once every one is signed by a key and names this artifact."""
    from service.attestation.bundle import BundleRefused, verified_statement

    verified, findings = [], []
    for number, document in enumerate(bundles):
        try:
            statement, signer = verified_statement(document, keys)
        except BundleRefused as error:
            findings.append(f"bundle {number + 1} of the verdict referrer: {error}")
            continue
        predicate = statement.get("predicate") if isinstance(statement.get("predicate"), dict) else {}
        uri = predicate.get("resourceUri") if isinstance(predicate, dict) else None
        if not isinstance(uri, str) or not uri.startswith(OCI_SCHEME) or not uri.endswith(f"@{reference.digest}"):
            findings.append(f"bundle {number + 1} of the verdict referrer attests another artifact ({uri!r}, not @{reference.digest})")
            continue
        verified.append((statement, signer))
    if findings:
        raise Failed(*findings)
    return verified


def _model_subjects(statement: dict[str, Any]) -> list[str]:
    subjects = statement.get("subject") if isinstance(statement.get("subject"), list) else []
    assert isinstance(subjects, list)
    return [
        str(subject.get("name"))
        for subject in subjects
        if isinstance(subject, dict) and isinstance(subject.get("annotations"), dict) and subject["annotations"] == MODEL_ROLE
    ]


def _file_findings(tree: ArtifactTree, verified: list[tuple[dict[str, Any], str]]) -> list[str]:
    """Each subject against the pulled files, each attested result, and every .onnx file of the artifact attested."""
    findings: list[str] = []
    attested: set[str] = set()
    for statement, _ in verified:
        findings += folder_findings(tree.root, statement) + result_findings(statement)
        attested.update(_model_subjects(statement))
    findings += [
        f"the artifact's model {model} has no attestation in the verdict referrer" for model in tree.models if model not in attested
    ]
    return findings


async def _referrer_bundles(registry: OciRegistry, reference: ArtifactReference, folder: Path) -> list[bytes]:
    """The bundles (layers) of the artifact's newest signed verdict referrer."""
    entry = _newest_signed(await referrers_of(registry, reference.repository, reference.digest), reference)
    digest = entry.get("digest")
    if not isinstance(digest, str) or not valid_reference(reference.repository, digest):
        raise Failed(f"the verdict referrer's digest {str(digest)[:100]!r} is malformed")
    manifest = (await registry.manifest(reference.repository, digest, (OCI_MANIFEST,))).json()
    subject = manifest.get("subject")
    if not isinstance(subject, dict) or subject.get("digest") != reference.digest:
        raise Failed(f"the verdict referrer {digest} is not about {reference.digest} (its subject)")
    layers = manifest.get("layers")
    if not isinstance(layers, list) or not layers or len(layers) > MAX_MODEL_FILES:
        raise Failed(f"the verdict referrer {digest} holds no bundle layers (or more than {MAX_MODEL_FILES})")
    bundles = []
    for number, layer in enumerate(layers):
        if not isinstance(layer, dict) or layer.get("mediaType") != SIGSTORE_BUNDLE or not isinstance(layer.get("digest"), str):
            raise Failed(f"layer {number + 1} of the verdict referrer {digest} is not a {SIGSTORE_BUNDLE} descriptor")
        target = folder / f"bundle-{number}"
        await registry.blob(reference.repository, layer["digest"], target, MAX_MANIFEST)
        bundles.append(target.read_bytes())
    return bundles


async def _verify(args: argparse.Namespace, keys: list[PublicKey], reference: ArtifactReference, work: Path) -> list[str]:
    """Steps 1 to 5 of the module comment, in `work`: each verified model's line of the report; Failed saying what failed."""
    scheme = "http" if args.plain_http else "https"
    registry = OciRegistry(f"{scheme}://{reference.registry}", args.credentials)
    try:
        pulled = await registry.manifest(reference.repository, reference.digest)
        try:
            layers = onnx_layers(pulled.json(), pulled.media_type)
        except Refused as error:
            raise Failed(f"{reference}: {error}") from None
        if layers is None:
            raise Failed(f"{reference} is no ONNX artifact: no layer of its manifest names an .onnx file")
        (work / "referrer").mkdir()
        verified = _verified_bundles(await _referrer_bundles(registry, reference, work / "referrer"), keys, reference)
        (work / "artifact").mkdir()
        try:
            tree = await pull_tree(registry, reference.repository, layers, work / "artifact", args.max_bytes, args.max_files)
        except (Refused, UploadTooLarge, BadInput) as error:
            raise Failed(f"{reference}: {error}") from None
        findings = _file_findings(tree, verified)
        if findings:
            raise Failed(*findings)
        if args.output is not None:
            _move_verified(tree, verified, args.output)
    except (OciRefused, OciUnavailable, TooLarge) as error:
        raise Failed(f"{reference}: the registry: {error}") from None
    finally:
        await registry.close()
    lines = []
    for statement, signer in verified:
        names = ", ".join(str(subject.get("name")) for subject in statement["subject"])
        levels = ", ".join(statement["predicate"].get("verifiedLevels", []))
        lines.append(f"verified {reference}: {names}; signed by key {signer}; PASSED ({levels})")
    return lines


def _move_verified(tree: ArtifactTree, verified: list[tuple[dict[str, Any], str]], output: Path) -> None:
    """Every subject's file from the tree into `output`, at its path (checked inside the folder by `folder_findings`)."""
    for statement, _ in verified:
        for subject in statement["subject"]:
            name = PurePosixPath(subject["name"])
            target = output.joinpath(*name.parts)
            if target.exists():  # a file two models share: moved once
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tree.root.joinpath(*name.parts), target)


def _work_folder(output: Path | None) -> tuple[Path, bool]:
    """(the work folder, whether it is inside --output); SettingsError when --output is neither new nor empty."""
    if output is None:
        return Path(tempfile.mkdtemp(prefix="onnx-import-verify-")), False
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise SettingsError(f"--output {str(output)!r} is not a new or empty folder")
    output.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=".onnx-import-verify-", dir=output)), True


def verify_artifact(args: argparse.Namespace, keys: list[PublicKey]) -> int:
    """`onnx-import verify oci://...` (`args` its parsed flags, `keys` its public keys): the exit status."""
    try:
        reference = parse_reference(args.path)
        defaults = Settings()  # the service's limits, where the flags name none
        args.max_bytes = parse_size(args.max_upload_total) if args.max_upload_total else defaults.max_upload_total
        args.max_files = int(args.max_external_files) if args.max_external_files else defaults.max_external_files
        credentials = credentials_file(args.credentials, dict(os.environ))
        if credentials is not None and not os.access(credentials, os.R_OK):
            raise SettingsError(f"the registry's credentials {str(credentials)!r} cannot be read")
        args.credentials = credentials
        work, inside = _work_folder(args.output)
    except (ValueError, SettingsError) as error:
        print(f"onnx-import verify: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        lines = asyncio.run(_verify(args, keys, reference, work))
    except Failed as failed:
        for finding in failed.findings:
            print(f"onnx-import verify: {finding}", file=sys.stderr)
        if inside:
            for item in args.output.iterdir():  # nothing is left where the server would read it
                shutil.rmtree(item) if item.is_dir() else item.unlink()
        return EXIT_REFUSED
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for line in lines:
        print(line)
    return EXIT_VERIFIED
