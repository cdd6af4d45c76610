"""A tenant's own check runs of a model: what it asked, what ran, when, with what.

Owns `CheckRuns`, the document the store keeps beside each tenant's record of
a model (`Index.keep_checks`): every stage this tenant ran on these bytes, its
latest run only (status, counts, reason, when it ran, the versions of the code
that ran it, the smoke run's dimension bindings: those asked and those it
ran at), and that run's findings.
Content is shared between tenants, check results never are: another tenant's
runs are neither shown nor reused, so neither a stage's answer nor its answer
time says that someone else holds the same bytes.

`stages_missing` says which stages of a request this tenant has not run (or ran
the smoke run asked other bindings: `SmokeAsked`); `merged` lays a new run over the earlier
ones (stage by stage); `summary_for` gives a stored summary this tenant's
`checks`, `verdict` and `diagnostics`. Pure: no I/O but the package versions
read once from the installed metadata.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from service.checks.outcome import DEFAULT_SECOND_DIM, STAGES, BindingSource, Finding, Stage, StageResult, Status, Weights, verdict

RUNS_FORMAT: Final = "onnx-service-checks/1"
SERVICE_DISTRIBUTION: Final = "onnx-import-service"
# The code each stage runs: ours for schema and security, onnx's strict shape
# inference for shape, an onnxruntime session for runtime and smoke.
STAGE_CODE: Final[dict[Stage, tuple[str, ...]]] = {
    "signature": (SERVICE_DISTRIBUTION, "model-signing"),
    "schema": (SERVICE_DISTRIBUTION,),
    "security": (SERVICE_DISTRIBUTION,),
    "shape": ("onnx",),
    "runtime": ("onnxruntime",),
    "smoke": ("onnxruntime",),
}
BOUND_STAGES: Final[frozenset[Stage]] = frozenset({"smoke"})  # the stages that read `?dim=` bindings
# The stages whose answer depends on more than the model's bytes: `signature` reads the
# model's folder and its model.sig, which the model's id does not cover; run again each time asked.
FOLDER_STAGES: Final[frozenset[Stage]] = frozenset({"signature"})


@dataclass(frozen=True, slots=True)
class SmokeAsked:
    """What a smoke run is asked to bind: the request's `dims`, a registry's
    `soft_dims`, and the second binding of what is left (`--smoke-second-dim`).
    The model's own bindings are in its bytes, so the same for every run of it."""

    dims: tuple[tuple[str, int], ...] = ()
    soft_dims: tuple[tuple[str, int], ...] = ()
    second_dim: int = DEFAULT_SECOND_DIM


class StageRun(BaseModel):
    """One stage's latest run for this tenant (the summary's `checks.NAME`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    status: Status
    errors: int
    warnings: int
    reason: str = ""
    ran_at: str  # ISO 8601, UTC, when the run began
    versions: dict[str, str] = Field(default_factory=dict)  # distribution -> version of the code that ran it
    dims: list[tuple[str, int]] = Field(default_factory=list)  # the request's bindings a smoke run was asked
    soft_dims: list[tuple[str, int]] = Field(default_factory=list)  # a registry's bindings a smoke run was asked
    second_dim: int = 1  # the smoke run's second binding (1: none, as every run stored before there was one)
    bindings: list[dict[str, int]] = Field(default_factory=list)  # each smoke run's dimensions, in run order
    binding_sources: dict[str, BindingSource] = Field(default_factory=dict)  # where each of them came from
    seconds: float = 0.0  # how long the stage took (the reports' stage times)
    weights: Weights = ""  # `runtime`: how onnxruntime got the external weights (StageResult.weights)
    signature_sha256: str = ""  # `signature`: the model.sig checked (StageResult.signature_sha256)
    signer_fingerprint: str = ""  # `signature`: the key that verified it (StageResult.signer_fingerprint)

    def entry(self) -> dict[str, object]:
        entry: dict[str, object] = {"status": self.status, "errors": self.errors, "warnings": self.warnings}
        if self.reason:
            entry["reason"] = self.reason
        entry["ran_at"] = self.ran_at
        entry["versions"] = dict(self.versions)
        if self.dims:
            entry["dims"] = {name: value for name, value in self.dims}
        if self.bindings:
            entry["bindings"] = [dict(run) for run in self.bindings]
            entry["binding_sources"] = dict(self.binding_sources)
        if self.weights:
            entry["weights"] = self.weights
        if self.signature_sha256:
            entry["signature_sha256"] = self.signature_sha256
        if self.signer_fingerprint:
            entry["signer_fingerprint"] = self.signer_fingerprint
        entry["seconds"] = self.seconds
        return entry

    def result(self, stage: Stage) -> StageResult:
        return StageResult(
            stage, self.status, reason=self.reason, errors=self.errors, warnings=self.warnings, seconds=self.seconds,
            bindings=[dict(run) for run in self.bindings], binding_sources=dict(self.binding_sources), weights=self.weights,
            signature_sha256=self.signature_sha256, signer_fingerprint=self.signer_fingerprint,
        )  # fmt: skip

    def asked(self) -> SmokeAsked:
        """What this smoke run was asked to bind."""
        dims = tuple((name, value) for name, value in self.dims)
        return SmokeAsked(dims, tuple((name, value) for name, value in self.soft_dims), self.second_dim)


class CheckRuns(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    format: str = RUNS_FORMAT
    stages: dict[Stage, StageRun] = Field(default_factory=dict)
    findings: list[dict[str, Any]] = Field(default_factory=list)  # `Finding.as_dict()`, stage by stage in run order

    def to_bytes(self) -> bytes:
        return self.model_dump_json().encode()

    @classmethod
    def from_bytes(cls, document: bytes | None) -> CheckRuns | None:
        return None if not document else cls.model_validate_json(document)

    def results(self) -> list[StageResult]:
        return [self.stages[stage].result(stage) for stage in STAGES if stage in self.stages]

    def verdict(self) -> str:
        return verdict(self.results())

    def verified_at(self) -> datetime | None:
        """When the latest of these runs began (None: no run, or no time a run gave reads as one)."""
        times = []
        for run in self.stages.values():
            with contextlib.suppress(ValueError):
                times.append(datetime.fromisoformat(run.ran_at))
        return max(times, default=None)

    def findings_of(self, severity: str | None = None, stage: str | None = None) -> list[dict[str, Any]]:
        return [
            finding
            for finding in self.findings
            if (severity is None or finding.get("severity") == severity) and (stage is None or finding.get("stage") == stage)
        ]


@functools.cache
def code_versions(stage: Stage) -> dict[str, str]:
    """The installed versions of the code `stage` runs (a distribution not installed is left out)."""
    found = {}
    for distribution in STAGE_CODE[stage]:
        try:
            found[distribution] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def runs_of(results: Iterable[StageResult], findings: Iterable[Finding], smoke: SmokeAsked, ran_at: str) -> CheckRuns:
    """One run's stages and findings as a `CheckRuns`; `smoke`, what its smoke run was asked to bind."""
    stages = {result.stage: _stage_run(result, smoke, ran_at) for result in results}
    listed = [finding.as_dict() for finding in findings if finding.stage in stages]
    return CheckRuns(stages=dict(sorted(stages.items(), key=lambda item: STAGES.index(item[0]))), findings=_in_stage_order(listed))


def _stage_run(result: StageResult, smoke: SmokeAsked, ran_at: str) -> StageRun:
    bound = result.stage in BOUND_STAGES
    return StageRun(
        status=result.status,
        errors=result.errors,
        warnings=result.warnings,
        reason=result.reason,
        ran_at=ran_at,
        versions=code_versions(result.stage),
        dims=list(smoke.dims) if bound else [],
        soft_dims=list(smoke.soft_dims) if bound else [],
        second_dim=smoke.second_dim if bound else 1,
        bindings=[dict(run) for run in result.bindings],
        binding_sources=dict(result.binding_sources),
        seconds=round(max(result.seconds, 0.0), 3),
        weights=result.weights,
        signature_sha256=result.signature_sha256,
        signer_fingerprint=result.signer_fingerprint,
    )


def merged(earlier: CheckRuns | None, later: CheckRuns) -> CheckRuns:
    """`later`'s stages in place of the same stages of `earlier`; the others kept."""
    if earlier is None:
        return later
    kept = {stage: run for stage, run in earlier.stages.items() if stage not in later.stages}
    stages = {**kept, **later.stages}
    findings = [finding for finding in earlier.findings if finding.get("stage") in kept] + later.findings
    return CheckRuns(stages=dict(sorted(stages.items(), key=lambda item: STAGES.index(item[0]))), findings=_in_stage_order(findings))


def stages_missing(runs: CheckRuns | None, asked: Sequence[Stage], smoke: SmokeAsked) -> tuple[Stage, ...]:
    """The stages of a request this tenant has not run on the model (a smoke run
    asked other bindings, or another second binding, counts as not run, and so does every one of
    FOLDER_STAGES); `smoke` brings `runtime`."""
    had = runs.stages if runs is not None else {}
    missing = {
        stage for stage in asked if stage not in had or stage in FOLDER_STAGES or (stage in BOUND_STAGES and had[stage].asked() != smoke)
    }
    if "smoke" in missing:
        missing.add("runtime")
    return tuple(stage for stage in STAGES if stage in missing)


def summary_for(summary: dict[str, Any], runs: CheckRuns, items: int) -> dict[str, Any]:
    """The stored summary as this tenant sees it: its own `checks`, `verdict`
    and `diagnostics` (counts, and the first `items` findings)."""
    summary["checks"] = {stage: run.entry() for stage, run in runs.stages.items()}
    summary["verdict"] = runs.verdict()
    summary["diagnostics"] = {
        "errors": sum(run.errors for run in runs.stages.values()),
        "warnings": sum(run.warnings for run in runs.stages.values()),
        "items": runs.findings[:items],
    }
    counts = summary.setdefault("counts", {})
    counts["diagnostics"] = len(runs.findings)
    truncated = [name for name in summary.get("truncated", []) if name != "diagnostics"]
    if len(runs.findings) > items:
        truncated.append("diagnostics")
    summary["truncated"] = truncated
    return summary


def _in_stage_order(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    order: dict[str, int] = {stage: index for index, stage in enumerate(STAGES)}
    return sorted(findings, key=lambda finding: order.get(str(finding.get("stage")), len(STAGES)))
