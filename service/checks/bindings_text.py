"""The smoke run's bindings as one line of text: `bindings_text`.

For a registry's tag or a log line, where the summary's `bindings` (one map
per run, `service.checks.outcome.StageResult.bindings`) does not fit: each
dimension once, in the order the runs list them, with its value in each run
(`batch=1,2; x[1]=1,2`); a dimension every run gave the same value shows it
once (`seq=16`). Empty for a run that bound no dimension.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def bindings_text(bindings: Sequence[Mapping[str, int]]) -> str:
    """`batch=1,2; x[1]=1,2` for runs at {batch: 1, x[1]: 1} and {batch: 2, x[1]: 2}."""
    values: dict[str, list[int]] = {}
    for run in bindings:
        for key, value in run.items():
            values.setdefault(key, []).append(value)
    parts = []
    for key, taken in values.items():
        shown = taken if len(set(taken)) > 1 else taken[:1]
        parts.append(f"{key}={','.join(str(value) for value in shown)}")
    return "; ".join(parts)
