"""The `signature` stage as the front end runs it: `signature_results`, on a `SignedFolder`.

A source says which folder holds the model as its signer signed it
(`SignedFolder`): a folder read in place (a path under the data root, a file
of `onnx-import check`), or an upload's files, each under the name the client
sent it by (the model part's file name, each external part's location, and
`model.sig`). The front end lists a folder read in place (`folder_files`: regular files only,
by their paths below it, "/"-separated; git's own paths left out as
model-signing leaves them out; no link followed, and an entry that is neither
a file nor a folder is an error of the stage; at most `--max-external-files`
plus two files: the model, its external data, its model.sig), and reads
`--trusted-signers` (public keys and certificates, PEM: not secret). Without a
`model.sig` in the folder the stage is `skipped`, or fails under
`--require-signature`, and no worker runs. Otherwise a signature worker of its
own (task "signature", `service.checks.stages.model_signature`) opens each listed
file through the file broker (the same rules as external data: inside the
folder, a regular file), verifies the signature with model-signing and hashes
the files from their descriptors; the front end reads no byte of them.
Fail closed: a worker that crashes or hits a limit leaves the stage
`incomplete` with the reason. Blocking (call from a thread); shared by the
service's imports and the `onnx-import` command.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

from service.checks.outcome import GIT_PATHS, IN_SIGNATURE_WORKER, MAX_SIGNATURE_BYTES, SIGNATURE_FILE, Finding, StageResult, incomplete
from service.sandbox.protocol import WorkerJob
from service.sandbox.supervisor import Sandbox, WorkerControl
from service.settings import Settings

log = logging.getLogger("service.sandbox")
MAX_TRUSTED_SIGNERS_BYTES = 1 << 20  # the --trusted-signers file is read at most this far
NO_SIGNATURE = f"no {SIGNATURE_FILE} in the model's folder"
SIGNATURE_REQUIRED = "signature-required"  # the finding of a model without a signature, under --require-signature
FOLDER_UNREADABLE = "signed-file-unreadable"  # an entry of the folder that is not a regular file, or a folder too large to list


@dataclass(frozen=True, slots=True)
class SignedFolder:
    """The folder the `signature` stage verifies: `directory` (absolute), the model's name in it (which the
    signature must cover), and its files as (the name the signer gave it, its path below `directory`); None:
    every file below `directory`, listed."""

    directory: str
    model: str
    files: tuple[tuple[str, str], ...] | None = None
    refused: tuple[tuple[str, str], ...] = ()  # (name, why): files of the signed folder the source could not bring


@dataclass(frozen=True, slots=True)
class SignaturePolicy:
    """What the service trusts and asks: `--trusted-signers`, `--require-signature`."""

    trusted_signers: Path | None = None
    required: bool = False

    @classmethod
    def of(cls, settings: Settings) -> SignaturePolicy:
        return cls(settings.trusted_signers, settings.require_signature)


@dataclass(slots=True)
class FolderListing:
    """A model folder's files (relative paths, sorted) and what could not be listed as one."""

    files: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)  # (relative path, why)


def folder_files(folder: str, max_files: int) -> FolderListing:
    """The regular files below `folder` (see the module comment); past `max_files`, a refusal of the folder."""
    listing = FolderListing()
    pending = [""]
    while pending:
        below = pending.pop()
        try:
            entries = sorted(os.scandir(os.path.join(folder, below)), key=lambda entry: entry.name)
        except OSError as error:
            listing.refused.append((below or ".", f"cannot be listed: {error.strerror}"))
            continue
        for entry in entries:
            name = f"{below}/{entry.name}" if below else entry.name
            if not below and entry.name in GIT_PATHS:
                continue
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError as error:
                listing.refused.append((name, f"cannot be examined: {error.strerror}"))
                continue
            if stat.S_ISDIR(mode):
                pending.append(name)
            elif stat.S_ISREG(mode):
                listing.files.append(name)
            else:
                listing.refused.append((name, "is not a regular file (a link, a device, a pipe): the signature check reads files only"))
            if len(listing.files) > max_files:
                listing.refused.append((".", f"holds more than {max_files} files (--max-external-files, with the model and its signature)"))
                listing.files.clear()
                return listing
    listing.files.sort()
    return listing


def trusted_signers_text(path: Path | None) -> str:
    """The PEM text of `--trusted-signers` ("" without one), read anew for each check (a file replaced takes effect)."""
    if path is None:
        return ""
    with open(path, "rb") as file:
        return file.read(MAX_TRUSTED_SIGNERS_BYTES).decode("utf-8", "replace")


def signature_results(
    sandbox: Sandbox, job: WorkerJob, folder: SignedFolder | None, policy: SignaturePolicy, control: WorkerControl | None = None
) -> list[StageResult]:
    """The `signature` stage of `job`, if it asks it, on `folder` (the model's; None: a source without one, such as
    a model the store holds, whose signature was checked, if at all, when it was imported), under `policy`
    (`--trusted-signers`, `--require-signature`)."""
    if not any(stage in IN_SIGNATURE_WORKER for stage in job.checks):
        return []
    if folder is None:
        reason = (
            "not run: this source gives no model folder (a model the store holds, a data root on object storage); "
            f"import the model from its folder, with its {SIGNATURE_FILE}, to check its signature"
        )
        return [incomplete("signature", reason)]
    if folder.files is None:
        listing = folder_files(folder.directory, sandbox.settings.max_external_files + 2)
        files = tuple((name, name) for name in listing.files)
        signed = os.path.lexists(os.path.join(folder.directory, SIGNATURE_FILE))
    else:
        listing, files = FolderListing(), folder.files
        signed = any(name == SIGNATURE_FILE for name, _ in files)
    if not signed:
        if not policy.required:
            return [StageResult.ended("signature", "skipped", NO_SIGNATURE)]
        result = StageResult("signature")
        message = f"{NO_SIGNATURE}, and --require-signature asks one"
        result.add(Finding("signature", "error", SIGNATURE_REQUIRED, message, field_path=SIGNATURE_FILE))
        return [result.finish()]
    listing.refused += folder.refused
    signature_path = next((path for name, path in files if name == SIGNATURE_FILE), None)
    if signature_path is None:  # a model.sig that is not a file (a link), or a folder too large to list: said by the refusals
        result = _with_refusals(StageResult("signature"), listing)
        if not result.errors:  # fail closed, whatever the listing said
            result.add(Finding("signature", "error", "signature-unreadable", f"{SIGNATURE_FILE} is not a file of the folder",
                               field_path=SIGNATURE_FILE))  # fmt: skip
        return [result.finish()]
    try:
        signature_size = os.stat(os.path.join(folder.directory, signature_path), follow_symlinks=False).st_size
        trusted = trusted_signers_text(policy.trusted_signers)
    except OSError as error:
        return [incomplete("signature", f"not run: {error.strerror} ({SIGNATURE_FILE} or --trusted-signers)")]
    if signature_size > MAX_SIGNATURE_BYTES or listing.refused:
        result = StageResult("signature")
        if signature_size > MAX_SIGNATURE_BYTES:
            result.add(Finding("signature", "error", "signature-unreadable",
                               f"{SIGNATURE_FILE} has {signature_size} bytes, more than the {MAX_SIGNATURE_BYTES} a signature may have",
                               field_path=SIGNATURE_FILE))  # fmt: skip
        return [_with_refusals(result, listing).finish()]
    signature_job = replace(
        job, task="signature", directory=os.path.abspath(folder.directory), external_dir=None, checks=("signature",), dims=(),
        soft_dims=(), folder_files=files, signed_model=folder.model, trusted_signers=trusted, max_external_files=len(files),
        hash_sources=False, mapped_files=(), memory=sandbox.settings.worker_memory,
    )  # fmt: skip
    reports, outcome = sandbox.run_checks(signature_job, control)
    log.info("%s", outcome.logged("signature", job.display_name))
    for report in reports:
        try:
            return [report.result()]
        except (ValueError, KeyError, TypeError):
            break  # a broken report: incomplete
    if outcome.status == "ok":
        why = "the signature worker did not report the stage"
    elif outcome.error is not None:
        why = f"the signature worker could not start: {outcome.error.message}"
    else:
        why = outcome.detail.replace("the import worker", "the signature worker").replace("the import", "the signature check")
    return [incomplete("signature", why or outcome.status)]


def _with_refusals(result: StageResult, listing: FolderListing) -> StageResult:
    for name, why in listing.refused:
        result.add(Finding("signature", "error", FOLDER_UNREADABLE, f"{name} {why}", field_path=name))
    return result
