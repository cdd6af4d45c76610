"""The findings in a work folder's catalogue: the one place the front end writes them, and reads them back.

Owns `append_findings` (the check worker's findings, after those the import
worker wrote with the tensors) and `findings_in` (all of them, in order, at
most MAX_FINDINGS_PER_STAGE of a stage: the stage's counts say how many
more), for an import's or a recheck's check runs
(`service.checks.requested.complete_checks`). The catalogue's format:
`service.tasks.catalog_format`; a stored one is read by `service.store.catalog`.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from service.checks.outcome import MAX_FINDINGS_PER_STAGE, STAGES, Finding
from service.store.catalog import Catalog
from service.tasks.catalog_format import DIAGNOSTIC_COLUMNS, diagnostic_row

FINDINGS_READ = MAX_FINDINGS_PER_STAGE * len(STAGES)


def append_findings(catalog: Path, findings: list[Finding]) -> None:
    """Add `findings` to the catalogue's diagnostics, after those it holds."""
    connection = sqlite3.connect(catalog)
    try:
        (last,) = connection.execute("SELECT coalesce(max(seq), -1) FROM diagnostics").fetchone()
        rows = (diagnostic_row(last + 1 + index, finding) for index, finding in enumerate(findings))
        connection.executemany(f"INSERT INTO diagnostics ({DIAGNOSTIC_COLUMNS}) VALUES ({', '.join('?' * 10)})", rows)
        connection.commit()
    finally:
        connection.close()


def findings_in(catalog: Path) -> list[Finding]:
    """The findings the catalogue holds, in order (at most MAX_FINDINGS_PER_STAGE of a stage)."""
    opened = Catalog(catalog)
    try:
        rows = opened.diagnostics(-1, FINDINGS_READ * 2, None)
    finally:
        opened.close()
    kept: list[Finding] = []
    per_stage: dict[str, int] = {}
    for row in rows:
        finding = Finding.from_dict(row)
        per_stage[finding.stage] = per_stage.get(finding.stage, 0) + 1
        if per_stage[finding.stage] <= MAX_FINDINGS_PER_STAGE:
            kept.append(finding)
    return kept
