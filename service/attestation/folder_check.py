"""A model folder checked against a Statement's subjects: `folder_findings`.

Each subject's name is taken relative to the model's folder (a name that is
absolute or climbs out with `..` is refused, never opened); its file is
hashed again (SHA-256) and must hold the digest the Statement gives it. The
path given may be the folder, or the model file in it: the model's subject
(annotated `onnx_import.role: model`) is then that file, whatever its name
at the check, and the external files are beside it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath
from typing import Any

from service.attestation.statement import MODEL_ROLE


def _file_sha256(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _is_model(subject: dict[str, Any]) -> bool:
    annotations = subject.get("annotations")
    return isinstance(annotations, dict) and all(annotations.get(key) == value for key, value in MODEL_ROLE.items())


def _safe_name(name: object) -> PurePosixPath | None:
    """The subject's name as a relative path inside the folder; None when it is not one."""
    if not isinstance(name, str) or not name or "\\" in name or "\0" in name:
        return None
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        return None
    return path


def folder_findings(path: Path, statement: dict[str, Any]) -> list[str]:
    """What does not match: each subject refused, missing or changed (empty: every file as attested)."""
    folder, model_file = (path.parent, path) if path.is_file() else (path, None)
    subjects = statement.get("subject")
    if not isinstance(subjects, list) or not subjects:
        return ["the Statement names no file"]
    findings = []
    for subject in subjects:
        if not isinstance(subject, dict):
            findings.append("the Statement holds a subject that is not an object")
            continue
        name = subject.get("name")
        relative = _safe_name(name)
        digest = subject.get("digest", {}).get("sha256") if isinstance(subject.get("digest"), dict) else None
        if relative is None:
            findings.append(f"refused subject {name!r}: not a path inside the model's folder (absolute, or with ..)")
            continue
        if not isinstance(digest, str):
            findings.append(f"refused subject {name!r}: no sha256 digest")
            continue
        target = model_file if model_file is not None and _is_model(subject) else folder / relative
        if not target.is_file():
            findings.append(f"missing file: {name} (expected at {target})")
            continue
        actual = _file_sha256(target)
        if actual != digest:
            findings.append(f"changed file: {name} (sha256 {actual}, the attestation says {digest})")
    return findings
