"""The `signature` stage, run in a worker of its own: the model folder's OpenSSF model signature verified.

Owns `signature_stage(job, opener)`, `load_library` and `trusted_pems` (the blocks of `--trusted-signers` it
trusts). The folder's `model.sig` (as `model_signing sign`
writes it: a Sigstore bundle holding a DSSE envelope over an in-toto statement whose
predicate lists each file of the folder with its digest) is read from a descriptor
the file broker opens (at most MAX_SIGNATURE_BYTES), parsed and verified by
model-signing's own library against the trusted signers the job carries
(`WorkerJob.trusted_signers`, the PEM text of `--trusted-signers`): a bundle
naming a public key by model-signing's key verifier (`sign_ec_key.Verifier`) with
each trusted EC key (the one its hint names first), a bundle carrying a
certificate chain by its certificate verifier (`sign_certificate.Verifier`,
offline: pyOpenSSL's store of the trusted certificates). The verifier answers
the manifest the signer signed (`model_signing.manifest.Manifest`); each file the
front end listed (`WorkerJob.folder_files`) and that the manifest's
serialization does not ignore (its `ignore_paths`, git's files, `model.sig`) is
opened through the broker and hashed from its descriptor with model-signing's
own hash engines (`_hashing.memory`), into a manifest of the same serialization
(whole files, or shards), and the two compared: a changed, missing or extra
file is an error naming it, and so is a file the broker will not open, and a
signature whose `ignore_paths` leave the model file itself out (`WorkerJob.signed_model`).
model-signing's public `verifying.Config.verify` reads both from paths, which a
worker does not have: this calls the verifiers and manifest types it calls,
with the bytes read here.

A `model.sig` that is not a bundle, too large, or verified by no trusted key or
chain fails the stage with its reason, never a traceback. The result carries
`signature_sha256` (of the model.sig's bytes) and, once a key verified it,
`signer_fingerprint` (SHA-256 of that key's SubjectPublicKeyInfo, DER).
Without the `signing` extra (model-signing, pyOpenSSL) the stage is
`incomplete`, its reason naming the extra. model-signing and cryptography
(some 20 MiB of a worker's memory) are imported by the signature worker alone,
before its walls (`load_library`, from `service.tasks.dispatch.open_input`), never
in the fork server: every other worker would carry them under its memory cap.
The functions below import them where they use them, from the modules loaded then.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import pathlib
import stat
from collections.abc import Callable, Iterator
from typing import Any, Final, cast

from importer import ModelImportError
from importer.source import ConfinedOpener
from service.checks.outcome import GIT_PATHS, MAX_SIGNATURE_BYTES, SIGNATURE_FILE, Finding, StageResult, incomplete
from service.sandbox.protocol import WorkerJob

# What the stage imports (`load_library`): model-signing's verifiers, manifest, hash engines and path rule; cryptography's X.509.
LIBRARY: Final = (
    "cryptography.x509", "cryptography.hazmat.primitives.serialization", "model_signing.manifest", "model_signing._hashing.memory",
    "model_signing._serialization.serialization", "model_signing._signing.sign_certificate", "model_signing._signing.sign_ec_key",
    "model_signing._signing.sign_sigstore_pb",
    # what those import only once they verify: a worker of a service run as root has left root by then, and may no
    # longer read the code (a checkout in root's 0700 home: CI's bare container)
    "cryptography.hazmat.backends.openssl", "google.protobuf.descriptor_pb2",
)  # fmt: skip
NEEDS_EXTRA: Final = "not run: the signature check needs the `signing` extra (pip install 'onnx-import-service[signing]')"
READ_CHUNK: Final = 1 << 20
# Finding codes.
SIGNATURE_UNREADABLE: Final = "signature-unreadable"  # model.sig too large, or not to be opened
SIGNATURE_MALFORMED: Final = "signature-malformed"  # not a bundle model-signing reads, or a statement it refuses
SIGNATURE_UNTRUSTED: Final = "signature-untrusted"  # verified by no trusted key or certificate chain
FILE_CHANGED: Final = "signed-file-changed"
FILE_MISSING: Final = "signed-file-missing"
FILE_EXTRA: Final = "unsigned-file"
FILE_UNREADABLE: Final = "signed-file-unreadable"


class _Bytes:
    """A file's bytes where model-signing reads a path (`read_text`, `read_bytes`): a worker has no path to give it."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def read_bytes(self) -> bytes:
        return self._data

    def read_text(self, encoding: str = "utf-8") -> str:
        return self._data.decode(encoding)


def _as_path(data: bytes) -> pathlib.Path:
    """`data` where model-signing takes a path to read (it calls only `read_text` or `read_bytes`)."""
    return cast(pathlib.Path, _Bytes(data))


def _error(result: StageResult, code: str, message: str, place: str = SIGNATURE_FILE) -> StageResult:
    result.add(Finding("signature", "error", code, message, field_path=place))
    return result


def _described(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error)[:300]}" if str(error) else type(error).__name__


def load_library() -> None:
    """Import model-signing's modules the stage uses, and cryptography's (a signature worker, before its walls:
    after them, its file policy may no longer let it read the code); without the `signing` extra, nothing."""
    for module in LIBRARY:
        try:
            importlib.import_module(module)
        except ImportError:
            return


def signature_stage(job: WorkerJob, opener: ConfinedOpener) -> StageResult:
    """Verify the folder's model.sig against `job.trusted_signers`, and its files against the manifest it signs."""
    try:
        from model_signing._signing import sign_sigstore_pb
    except (ImportError, OSError):  # a plain install (or a library its walls keep it from loading now)
        return incomplete("signature", NEEDS_EXTRA)
    result = StageResult("signature")
    try:
        data = _read_signature(job, opener)
    except (ModelImportError, OSError, ValueError) as error:
        return _error(result, SIGNATURE_UNREADABLE, f"{SIGNATURE_FILE} cannot be read: {_described(error)}").finish()
    result.signature_sha256 = hashlib.sha256(data).hexdigest()
    try:
        signature = sign_sigstore_pb.Signature.read(_as_path(data))
    except Exception as error:  # hostile bytes: whatever the parser raises is the signature's fault
        return _error(result, SIGNATURE_MALFORMED, f"{SIGNATURE_FILE} is not a model signature bundle: {_described(error)}").finish()
    verified = _verified(signature, job.trusted_signers, result)
    if verified is None:
        return result.finish()
    expected, fingerprint = verified
    result.signer_fingerprint = fingerprint
    _compare_files(job, opener, expected, result)
    return result.finish()


def _read_signature(job: WorkerJob, opener: ConfinedOpener) -> bytes:
    path = next((path for name, path in job.folder_files if name == SIGNATURE_FILE), SIGNATURE_FILE)
    fd, _ = opener(job.directory, path)
    with open(fd, "rb", closefd=True) as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > MAX_SIGNATURE_BYTES:
            raise ValueError(f"{info.st_size} bytes, more than the {MAX_SIGNATURE_BYTES} a signature may have")
        data = file.read(MAX_SIGNATURE_BYTES + 1)
    if len(data) > MAX_SIGNATURE_BYTES:
        raise ValueError(f"more than the {MAX_SIGNATURE_BYTES} bytes a signature may have")
    return data


def trusted_pems(text: str) -> tuple[list[bytes], list[bytes]]:
    """The PEM public keys and the PEM certificates of the trusted signers' text, each block as it stands (what the
    stage trusts; the attestations' policy names them by this too: `service.attestation.signing_keys`)."""
    keys: list[bytes] = []
    certificates: list[bytes] = []
    block: list[str] = []
    for line in text.splitlines():
        if line.startswith("-----BEGIN "):
            block = [line]
        elif block:
            block.append(line)
            if line.startswith("-----END "):
                pem = ("\n".join(block) + "\n").encode()
                if block[0] == "-----BEGIN PUBLIC KEY-----":
                    keys.append(pem)
                elif block[0] == "-----BEGIN CERTIFICATE-----":
                    certificates.append(pem)
                block = []
    return keys, certificates


def _fingerprint(public_key: Any) -> str:
    """SHA-256 (hex) of a public key's SubjectPublicKeyInfo, DER."""
    from cryptography.hazmat.primitives import serialization

    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def _verified(signature: Any, trusted_text: str, result: StageResult) -> tuple[Any, str] | None:
    """The manifest the signature signs and its signer's fingerprint, once a trusted key or chain verifies it;
    else None, with the finding saying why."""
    from cryptography.hazmat.primitives import serialization
    from model_signing._signing import sign_ec_key

    keys, certificates = trusted_pems(trusted_text)
    material = signature.bundle.verification_material
    chain = getattr(material, "x509_certificate_chain", None)
    if chain is not None and getattr(chain, "certificates", None):
        return _verified_by_chain(signature, chain, certificates, result)
    if getattr(material, "public_key", None) is None:
        _error(result, SIGNATURE_UNTRUSTED, f"{SIGNATURE_FILE} names neither a public key nor a certificate chain (a keyless Sigstore "
               "signature needs the network to verify, and is not verified here)")  # fmt: skip
        return None
    hint = getattr(material.public_key, "hint", None) or ""
    candidates = []
    for pem in keys:
        try:
            verifier = sign_ec_key.Verifier(_as_path(pem))
        except (ValueError, TypeError, AttributeError):
            continue  # a key model-signing does not sign with (not an EC key of its curves)
        public_key = serialization.load_pem_public_key(pem)
        named = hashlib.sha256(public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        candidates.append((named.hexdigest() == hint, verifier, public_key))
    candidates.sort(key=lambda candidate: not candidate[0])  # the key the bundle's hint names first
    last = ""
    for _, verifier, public_key in candidates:
        try:
            verifier._verify_signed_content(signature)  # the signature alone, as `verify` checks it first
        except Exception as error:  # not this key's signature
            last = _described(error)
            continue
        return _statement(verifier, signature, result, _fingerprint(public_key))
    if not trusted_text.strip():
        why = ": no --trusted-signers is given"
    elif not candidates:
        why = ": --trusted-signers holds no key of model-signing's kinds (EC P-256, P-384, P-521)"
    else:
        why = f" ({len(candidates)} tried; the last: {last})" if last else ""
    _error(result, SIGNATURE_UNTRUSTED, f"{SIGNATURE_FILE} is not signed by a trusted key{why}")
    return None


def _statement(verifier: Any, signature: Any, result: StageResult, fingerprint: str) -> tuple[Any, str] | None:
    """The manifest a verified signature signs, and `fingerprint`; None, with the finding, for a statement model-signing refuses."""
    try:
        return verifier.verify(signature), fingerprint
    except Exception as error:  # the signed payload is not a model-signing statement, or lists its files inconsistently
        _error(result, SIGNATURE_MALFORMED, f"{SIGNATURE_FILE} is signed, but its statement is refused: {_described(error)}")
        return None


def _verified_by_chain(signature: Any, chain: Any, certificates: list[bytes], result: StageResult) -> tuple[Any, str] | None:
    from cryptography import x509
    from model_signing._signing import sign_certificate

    if not certificates:
        _error(result, SIGNATURE_UNTRUSTED, f"{SIGNATURE_FILE} is signed with a certificate, and --trusted-signers holds none")
        return None
    try:
        verifier = sign_certificate.Verifier([_as_path(b"".join(certificates))])
        verifier._verify_signed_content(signature)  # the chain to a trusted certificate, and the signature by its leaf
        public_key = x509.load_der_x509_certificate(chain.certificates[0].raw_bytes).public_key()
    except Exception as error:  # an untrusted chain, a certificate not for signing, a bad signature
        _error(result, SIGNATURE_UNTRUSTED, f"{SIGNATURE_FILE}'s certificate chain or signature is not trusted: {_described(error)}")
        return None
    return _statement(verifier, signature, result, _fingerprint(public_key))


Engine = Callable[[], Any]  # model-signing's hash engine (`_hashing.hashing.StreamingHashEngine`), made anew for each item


def _engine(hash_type: str) -> Engine:
    """model-signing's hash engine of a serialization's `hash_type` (as its manifests name them)."""
    from model_signing._hashing import memory

    engines: dict[str, Engine] = {
        "sha256": memory.SHA256, "blake2": memory.BLAKE2, "blake2b": memory.BLAKE2, "blake3": memory.BLAKE3,
    }  # fmt: skip
    if hash_type not in engines:
        raise ValueError(f"the signature's hash {hash_type!r} is none of model-signing's")
    return engines[hash_type]


def _ignored(name: str, ignore_paths: list[pathlib.PurePosixPath]) -> bool:
    """model-signing's own test of a path against the paths a signature ignores (relative paths here, as pure paths)."""
    from model_signing._serialization import serialization as model_serialization

    pure = cast(list[pathlib.Path], ignore_paths)  # it calls `is_relative_to` alone, which pure paths have
    return model_serialization.should_ignore(cast(pathlib.Path, pathlib.PurePosixPath(name)), pure)


def _compare_files(job: WorkerJob, opener: ConfinedOpener, expected: Any, result: StageResult) -> None:
    """Hash the listed files the signature does not ignore; an error for each that differs from `expected`."""
    from model_signing import manifest

    parameters = expected.serialization_type
    try:
        engine = _engine(str(parameters.get("hash_type", "")))
        method = parameters.get("method")
        shard_size = int(parameters["shard_size"]) if method == "shards" else 0
        if method not in ("files", "shards") or (method == "shards" and shard_size <= 0):
            raise ValueError(f"the signature's serialization {method!r} is none of model-signing's")
        given = parameters.get("ignore_paths", [])
        if not isinstance(given, list) or not all(isinstance(path, str) for path in given):
            raise ValueError("the signature's ignore_paths is not a list of paths")
    except (ValueError, TypeError, KeyError) as error:
        _error(result, SIGNATURE_MALFORMED, f"{SIGNATURE_FILE}: {_described(error)}")
        return
    ignore_paths = [pathlib.PurePosixPath(path) for path in (*given, *GIT_PATHS, SIGNATURE_FILE)]
    if job.signed_model and _ignored(job.signed_model, ignore_paths):  # signed, but not the model: its bytes unchecked
        message = f"the signature leaves the model file {job.signed_model} out (its ignore_paths): the model is not signed"
        _error(result, FILE_EXTRA, message, job.signed_model)
    items: list[Any] = []
    unreadable: set[str] = set()
    for name, path in job.folder_files:
        if _ignored(name, ignore_paths):
            continue
        try:
            items += _hashed(job, opener, name, path, engine, shard_size)
        except (ModelImportError, OSError) as error:
            message = error.message if isinstance(error, ModelImportError) else (error.strerror or str(error))
            _error(result, FILE_UNREADABLE, f"{name} cannot be read to check its signature: {message}", name)
            unreadable.add(name)
    actual = manifest.Manifest(expected.model_name, items, manifest.SerializationType.from_args(parameters))
    _differences(actual, expected, unreadable, result)


def _hashed(job: WorkerJob, opener: ConfinedOpener, name: str, path: str, engine: Engine, shard_size: int) -> list[Any]:
    """The manifest items of the file `name` (at `path` below the job's folder): the whole file, or its shards of
    `shard_size` bytes (as model-signing cuts them)."""
    from model_signing import manifest

    fd, _ = opener(job.directory, path)
    with open(fd, "rb", closefd=True, buffering=0) as file:
        if not shard_size:
            hasher = engine()
            for chunk in _chunks(file, None):
                hasher.update(chunk)
            return [manifest.FileManifestItem(path=pathlib.PurePosixPath(name), digest=hasher.compute())]
        size = os.fstat(file.fileno()).st_size
        items = []
        for start in range(0, size, shard_size):
            end = min(start + shard_size, size)
            hasher = engine()
            for chunk in _chunks(file, end - start):
                hasher.update(chunk)
            shard = manifest.ShardedFileManifestItem(path=pathlib.PurePosixPath(name), start=start, end=end, digest=hasher.compute())
            items.append(shard)
        return items


def _chunks(file: Any, length: int | None) -> Iterator[bytes]:
    """The next `length` bytes of `file` (all that is left for None), a chunk at a time."""
    left = length
    while left is None or left > 0:
        chunk = file.read(READ_CHUNK if left is None else min(READ_CHUNK, left))
        if not chunk:
            return
        if left is not None:
            left -= len(chunk)
        yield chunk


def _differences(actual: Any, expected: Any, unreadable: set[str], result: StageResult) -> None:
    """An error for each file the signature lists with another digest, lists but the folder lacks (and is not
    `unreadable`, said already), or does not list."""
    had = {descriptor.identifier: descriptor.digest for descriptor in actual.resource_descriptors()}
    signed = {descriptor.identifier: descriptor.digest for descriptor in expected.resource_descriptors()}
    for name in sorted(signed.keys() | had.keys()):
        place = name.split(":", 1)[0]  # a shard's name is PATH:START:END
        if place in unreadable:
            continue
        if name not in had:
            _error(result, FILE_MISSING, f"{name} is signed, and the model's folder does not hold it", place)
        elif name not in signed:
            _error(result, FILE_EXTRA, f"{name} is in the model's folder, and the signature does not list it", place)
        elif had[name].digest_value != signed[name].digest_value:  # hashed as the serialization says: its name aside
            _error(result, FILE_CHANGED, f"{name} is not the file signed: its {signed[name].algorithm} differs", place)
