"""What a check stage reports: its findings, each with its place, and its status.

Owns the stage names (`STAGES`, in the order they run), `Finding` (one
diagnostic of any stage: stable code, severity, message, node, field path and
byte offset), `StageResult` (a stage's status and findings) and `verdict`,
which fails closed: a stage asked for that did not finish, or was not run,
makes the verdict `incomplete`, never `pass`. `parse_checks` reads `schema,shape,...` as a
request or a setting gives it; `parse_dims` the smoke run's `NAME:VALUE` and
`INPUT[AXIS]:VALUE` bindings (`parse_dims_text`, comma-separated), and `DimensionBindingError` is one the model has
no place for; `BINDING_SOURCES`, where a smoke run's binding came from, and
`DEFAULT_SECOND_DIM`, the value its second run gives the dimensions left unbound;
`DEFAULT_CHECKS` and `GATE_CHECKS`, the stages an import and a registry gate run unless told;
which worker runs each stage (`IN_IMPORT_WORKER`, `IN_CHECK_WORKER`,
`IN_SIGNATURE_WORKER`), and the `signature` stage's file (`SIGNATURE_FILE`, at most
`MAX_SIGNATURE_BYTES`) and the paths it leaves out as model-signing does (`GIT_PATHS`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from importer.diagnostics import Diagnostic, bounded

Stage = Literal["signature", "schema", "shape", "runtime", "smoke", "security"]
Status = Literal["pass", "fail", "incomplete", "skipped"]
Severity = Literal["error", "warning"]
Verdict = Literal["pass", "fail", "incomplete"]

STAGES: Final[tuple[Stage, ...]] = ("signature", "schema", "security", "shape", "runtime", "smoke")  # the order they run in
DEFAULT_CHECKS: Final = "schema,shape,security"
Weights = Literal["", "mapped", "handed over"]
MAPPED: Final[Weights] = "mapped"  # the runtime stage: onnxruntime opened and mapped the model's files itself
HANDED_OVER: Final[Weights] = "handed over"  # ... or was given them from the importer's memory (no mount namespace)
IN_IMPORT_WORKER: Final[frozenset[str]] = frozenset({"schema", "security"})  # our own code, in the import's worker
IN_CHECK_WORKER: Final[frozenset[str]] = frozenset({"shape", "runtime", "smoke"})  # onnx and onnxruntime, in a worker of their own
IN_SIGNATURE_WORKER: Final[frozenset[str]] = frozenset({"signature"})  # model-signing, on the model's folder, in a worker of its own
# What a registry gate runs unless told otherwise: every stage but `signature`, which only a signed folder passes.
GATE_CHECKS: Final = ",".join(stage for stage in STAGES if stage not in IN_SIGNATURE_WORKER)
SHA256_HEX: Final = re.compile(r"[0-9a-f]{64}")  # a digest as the `signature` stage reports it
SIGNATURE_FILE: Final = "model.sig"  # the `signature` stage's file, in the model's folder, as `model_signing sign` writes it
MAX_SIGNATURE_BYTES: Final = 1 << 20  # a model.sig larger than this is refused unread
# The folder's paths model-signing's verification always leaves out (`model_signing.hashing.Config.hash`, ignore_git_paths).
GIT_PATHS: Final = (".git", ".gitattributes", ".github", ".gitignore")
MAX_FINDINGS_PER_STAGE: Final = 1000  # past this a stage counts its findings but lists no more
# Where a smoke run's binding came from, in the order they take precedence (a later one fills only what is left).
BindingSource = Literal["request", "model", "registry", "default"]
BINDING_SOURCES: Final[tuple[BindingSource, ...]] = ("request", "model", "registry", "default")
DEFAULT_SECOND_DIM: Final = 2  # the smoke run's second binding of every dimension left unbound (--smoke-second-dim)


@dataclass(frozen=True, slots=True)
class Finding:
    """One diagnostic of a stage, placed like the operator check's: `field_path`
    is the field at fault (`ModelProto.graph.node[17]`), `offset` the byte
    offset of its key in the model file (0 for the model as a whole);
    `node_name`, `op_type` and `domain` describe the node, None for a finding
    about the model."""

    stage: Stage
    severity: Severity
    code: str  # stable, kebab-case: callers act on it
    message: str
    node_name: str | None = None
    op_type: str | None = None
    domain: str | None = None
    field_path: str = "ModelProto"
    offset: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "stage": self.stage,
            "severity": self.severity,
            "code": self.code,
            "message": bounded(self.message),
            "node_name": self.node_name,
            "op_type": self.op_type,
            "domain": self.domain,
            "field_path": self.field_path,
            "offset": self.offset,
        }

    @classmethod
    def from_dict(cls, item: Mapping[str, object]) -> Finding:
        def text(key: str) -> str | None:
            value = item.get(key)
            return None if value is None else str(value)

        severity: Severity = "warning" if item.get("severity") == "warning" else "error"
        stage = next((known for known in STAGES if known == item.get("stage", "schema")), None)
        if stage is None:
            raise ValueError(f"unknown stage {item.get('stage')!r}")
        offset = item.get("offset", 0)
        return cls(
            stage=stage,
            severity=severity,
            code=str(item["code"]),
            message=str(item["message"]),
            node_name=text("node_name"),
            op_type=text("op_type"),
            domain=text("domain"),
            field_path=str(item.get("field_path") or "ModelProto"),
            offset=offset if isinstance(offset, int) else 0,
        )

    @classmethod
    def from_diagnostic(cls, diagnostic: Diagnostic) -> Finding:
        """The operator check's diagnostic, as the `schema` stage's finding."""
        return cls(
            "schema",
            "warning" if diagnostic.severity.value == "warning" else "error",
            diagnostic.code.value,
            diagnostic.message,
            diagnostic.node_name,
            diagnostic.op_type,
            diagnostic.domain,
            diagnostic.field_path,
            diagnostic.offset,
        )


@dataclass(slots=True)
class StageResult:
    """A stage's outcome. `status` is `fail` when any finding is an error and
    `pass` otherwise, unless the stage did not finish (`incomplete`) or was
    not run (`skipped`); `reason` says why for those two. `findings` holds at
    most MAX_FINDINGS_PER_STAGE; `errors` and `warnings` count them all.
    `inferred`: the types the `shape` stage inferred for values the model
    does not declare, as JSON text (kept in the model's catalogue, never in
    the summary). `bindings`: the smoke stage's, one map per run it tried,
    in run order, of each dimension it bound (`NAME`, or `INPUT[AXIS]` for
    one without a name) to its value; `binding_sources` says where each
    came from (BINDING_SOURCES). `weights`: the runtime stage's way of
    giving onnxruntime the model's external data ("mapped": its session
    over the bound files, a model's large inline weights too; "handed over":
    from the importer's memory; "": neither). `signature_sha256` and
    `signer_fingerprint`: the `signature` stage's, the SHA-256 (hex) of the
    model's `model.sig` and of its signer's public key (the DER of its
    SubjectPublicKeyInfo), once that key verified it ("" otherwise)."""

    stage: Stage
    status: Status = "pass"
    findings: list[Finding] = field(default_factory=list)
    reason: str = ""
    errors: int = 0
    warnings: int = 0
    seconds: float = 0.0
    inferred: str = ""  # `shape`: the JSON list of {name, type} of the values the model does not declare
    bindings: list[dict[str, int]] = field(default_factory=list)  # `smoke`: each run's dimensions, in run order
    binding_sources: dict[str, BindingSource] = field(default_factory=dict)  # `smoke`: where each dimension's binding came from
    weights: Weights = ""  # `runtime`: how onnxruntime got the model's external (or large inline) weights (MAPPED, HANDED_OVER)
    signature_sha256: str = ""  # `signature`: SHA-256 of the model.sig file checked
    signer_fingerprint: str = ""  # `signature`: SHA-256 of the signer's public key (SubjectPublicKeyInfo, DER) that verified it

    def add(self, finding: Finding) -> None:
        if finding.severity == "error":
            self.errors += 1
        else:
            self.warnings += 1
        if len(self.findings) < MAX_FINDINGS_PER_STAGE:
            self.findings.append(finding)

    def finish(self) -> StageResult:
        """Set `status` from the findings (a stage that ran to its end)."""
        self.status = "fail" if self.errors else "pass"
        return self

    def as_dict(self) -> dict[str, object]:
        """The summary's `checks.NAME` (without the findings, which are paged)."""
        entry: dict[str, object] = {"status": self.status, "errors": self.errors, "warnings": self.warnings}
        if self.reason:
            entry["reason"] = bounded(self.reason)
        if self.bindings:
            entry["bindings"] = [dict(run) for run in self.bindings]
            entry["binding_sources"] = dict(self.binding_sources)
        if self.weights:
            entry["weights"] = self.weights
        if self.signature_sha256:
            entry["signature_sha256"] = self.signature_sha256
        if self.signer_fingerprint:
            entry["signer_fingerprint"] = self.signer_fingerprint
        return entry

    @classmethod
    def ended(cls, stage: Stage, status: Status, reason: str) -> StageResult:
        """A stage that did not run to its end (`incomplete`) or was not run (`skipped`)."""
        return cls(stage, status, reason=reason)


def results_of(summary: Mapping[str, Any]) -> list[StageResult]:
    """The stage results a stored summary gives (`checks`, without findings);
    a summary from before the stages has only the operator check's counts."""
    checks = summary.get("checks")
    if not isinstance(checks, Mapping):
        counted = summary.get("diagnostics") or {}
        return [StageResult("schema", errors=int(counted.get("errors", 0)), warnings=int(counted.get("warnings", 0))).finish()]
    results = []
    for stage in STAGES:
        entry = checks.get(stage)
        if isinstance(entry, Mapping):
            status = entry.get("status")
            results.append(
                StageResult(
                    stage,
                    status if status in ("pass", "fail", "incomplete", "skipped") else "incomplete",
                    reason=str(entry.get("reason", "")),
                    errors=int(entry.get("errors", 0)),
                    warnings=int(entry.get("warnings", 0)),
                    bindings=_bindings_of(entry.get("bindings")),
                    binding_sources=_sources_of(entry.get("binding_sources")),
                    weights=_weights_of(entry.get("weights")),
                    signature_sha256=_digest_of(entry.get("signature_sha256")),
                    signer_fingerprint=_digest_of(entry.get("signer_fingerprint")),
                )
            )
    return results


def _weights_of(given: object) -> Weights:
    return MAPPED if given == MAPPED else HANDED_OVER if given == HANDED_OVER else ""


def _digest_of(given: object) -> str:
    """A summary's SHA-256 in hex; anything else is none."""
    return given if isinstance(given, str) and SHA256_HEX.fullmatch(given) else ""


def _bindings_of(listed: object) -> list[dict[str, int]]:
    """A summary's `bindings` (a list of maps of dimension to value); anything else is none."""
    if not isinstance(listed, list):
        return []
    return [{str(key): value for key, value in run.items() if isinstance(value, int)} for run in listed if isinstance(run, Mapping)]


def _sources_of(given: object) -> dict[str, BindingSource]:
    """A summary's `binding_sources`; a source that is none of BINDING_SOURCES is left out."""
    if not isinstance(given, Mapping):
        return {}
    sources: dict[str, BindingSource] = {}
    for key, source in given.items():
        known = next((name for name in BINDING_SOURCES if name == source), None)
        if known is not None:
            sources[str(key)] = known
    return sources


def incomplete(stage: Stage, reason: str) -> StageResult:
    return StageResult.ended(stage, "incomplete", reason)


def verdict(results: Iterable[StageResult]) -> Verdict:
    """`fail` if any stage failed; else `incomplete` if any asked for did not
    finish or was not run (skipped: the smoke run of a model `security` flags,
    which then fails anyway, or of inputs that cannot be made); else `pass`."""
    statuses = {result.status for result in results}
    if "fail" in statuses:
        return "fail"
    if statuses & {"incomplete", "skipped"}:
        return "incomplete"
    return "pass"


class ChecksError(ValueError):
    """A list of checks that names no stage, or one that does not exist."""


def parse_checks(values: Sequence[str] | str) -> tuple[Stage, ...]:
    """`schema,shape` (or several such values) as stages, in the order they run.
    `smoke` brings `runtime`: the run needs the session the load makes."""
    items = [values] if isinstance(values, str) else list(values)
    asked = {part.strip() for value in items for part in value.split(",") if part.strip()}
    unknown = sorted(asked - set(STAGES))
    if unknown:
        raise ChecksError(f"unknown check {unknown[0]!r}: the checks are {', '.join(STAGES)}")
    if not asked:
        raise ChecksError(f"no check named: the checks are {', '.join(STAGES)}")
    if "smoke" in asked:
        asked.add("runtime")
    return tuple(stage for stage in STAGES if stage in asked)


DIMENSION_BINDING: Final = "DimensionBinding"  # the check worker's error kind for a binding the model has no place for
_AXIS_BINDING: Final = re.compile(r"(.*)\[([0-9]{1,6})\]", re.DOTALL)


class DimensionBindingError(ChecksError):
    """A `dim=` binding that names no symbolic dimension of the model and no
    free axis of one of its inputs: a usage error (exit 64, HTTP 400), known
    only once the model is read (the check worker reports it)."""


def dim_target(key: str) -> tuple[str, int | None]:
    """What a binding's key names: `(INPUT, AXIS)` for `INPUT[AXIS]`, else `(NAME, None)`, a symbolic dimension's name."""
    matched = _AXIS_BINDING.fullmatch(key)
    return (matched.group(1), int(matched.group(2))) if matched else (key, None)


def parse_dims(values: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """The smoke run's dimension bindings, each value 0 or more: `NAME:VALUE`
    binds the symbolic dimension NAME wherever it appears; `INPUT[AXIS]:VALUE`
    binds axis AXIS of input INPUT (a dimension without a name). The value is
    what follows the last ':' (a name may hold ':'), and a left side ending in
    `[DIGITS]` is an axis binding (kept as `INPUT[AXIS]`, the axis without
    leading zeros). A later binding of the same key wins."""
    bound: dict[str, int] = {}
    for value in values:
        name, colon, number = value.rpartition(":")
        if not colon or not name or not (number.isascii() and number.isdigit()) or len(number) > 12:
            raise ChecksError(f"a dimension is bound as NAME:VALUE or INPUT[AXIS]:VALUE, with VALUE a whole number: not {value[:100]!r}")
        target, axis = dim_target(name)
        if axis is not None:
            if not target:
                raise ChecksError(f"an axis binding names its input, INPUT[AXIS]:VALUE: not {value[:100]!r}")
            name = f"{target}[{axis}]"
        bound[name] = int(number)
    return tuple(sorted(bound.items()))


def parse_dims_text(text: str) -> tuple[tuple[str, int], ...]:
    """`parse_dims` of comma-separated bindings (`batch:4,seq:16`), as a setting or a tag writes them."""
    return parse_dims([part.strip() for part in text.split(",") if part.strip()])
