"""One model's checks as the reports take them, and the verdict of many.

Owns `ModelChecks` (a model's name as given, its stage results and findings,
or the importer's refusal instead: a refused model is a report's result too,
never a report of another shape), `worst` (the verdict of several models:
refused, then incomplete, then fail, then pass; as the command line's exit
status orders them) and `exit_status` (0 pass, 1 fail, 2 refused or
incomplete).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from service.checks.outcome import Finding, StageResult, verdict

ModelVerdict = Literal["pass", "fail", "incomplete", "refused"]

EXIT_OF_VERDICT: Final[dict[ModelVerdict, int]] = {"pass": 0, "fail": 1, "incomplete": 2, "refused": 2}
_ORDER: Final[tuple[ModelVerdict, ...]] = ("pass", "fail", "incomplete", "refused")  # worse to the right


@dataclass(frozen=True, slots=True)
class Refusal:
    """The importer's typed error for a model it refused: its kind, message,
    the refused field's path and the byte offset of its key (0 when the error
    names none)."""

    kind: str
    message: str
    field_path: str | None = None
    offset: int | None = None

    @classmethod
    def from_dict(cls, error: Mapping[str, object]) -> Refusal:
        offset = error.get("offset")
        path = error.get("field_path")
        return cls(
            str(error.get("kind") or "refused"),
            str(error.get("message") or ""),
            path if isinstance(path, str) and path else None,
            offset if isinstance(offset, int) and not isinstance(offset, bool) else None,
        )

    def as_dict(self) -> dict[str, object]:
        entry: dict[str, object] = {"kind": self.kind, "message": self.message}
        if self.field_path is not None:
            entry["field_path"] = self.field_path
        if self.offset is not None:
            entry["offset"] = self.offset
        return entry


@dataclass(frozen=True, slots=True)
class ModelChecks:
    """One model as a report shows it. `name` is the model as the caller named
    it (a path as given on the command line, or the service's input name);
    `uri` the report's artifact URI for it (None: made from `name`)."""

    name: str
    results: Sequence[StageResult] = ()
    findings: Sequence[Finding] = ()
    refusal: Refusal | None = None
    uri: str | None = None
    model_id: str | None = None
    sha256: str | None = None

    @property
    def verdict(self) -> ModelVerdict:
        return "refused" if self.refusal is not None else verdict(self.results)

    @property
    def finished(self) -> bool:
        """Every stage ran to its end (a refusal is an answer, not a failure of the tool)."""
        return all(result.status != "incomplete" for result in self.results)


def worst(verdicts: Iterable[ModelVerdict]) -> ModelVerdict:
    """The worst of several models' verdicts (`pass` for none)."""
    return max(verdicts, key=_ORDER.index, default="pass")


def exit_status(models: Iterable[ModelChecks]) -> int:
    """The command line's exit status for these models: 0 all pass, 1 any
    fail (and none worse), 2 any refused or incomplete."""
    return max((EXIT_OF_VERDICT[model.verdict] for model in models), default=0)
