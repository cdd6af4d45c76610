"""Microsoft's SARIF Multitool (npm `@microsoft/sarif-multitool`), as a test
runs it: `multitool_errors(log)` validates a SARIF log with the rules GitHub
code scanning applies (`validate --rule-kind "Gh;Sarif"`) and gives the
error-level results of its output log, one line each.

The tool is installed on first use into .cache/sarif-multitool with
`npm install --prefix` (tools/dev.sh's `test` does it beforehand); where npm
is missing or the registry cannot be reached, the test is skipped with the
reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import pytest

from support.paths import CACHE

VERSION = "5.7.0"
PREFIX = CACHE / "sarif-multitool"
PLATFORM_BINARY = PREFIX / "node_modules" / "@microsoft" / "sarif-multitool-linux" / "Sarif.Multitool"


@cache
def _binary() -> Path | str:
    """The Multitool's binary, installed if needed; or why there is none."""
    if not PLATFORM_BINARY.exists():
        npm = shutil.which("npm")
        if npm is None:
            return "npm is not installed (tools/dev.sh setup installs nodejs and npm as root)"
        PREFIX.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [npm, "install", "--prefix", str(PREFIX), "--no-audit", "--no-fund", f"@microsoft/sarif-multitool@{VERSION}"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0 or not PLATFORM_BINARY.exists():
            return f"npm could not install @microsoft/sarif-multitool@{VERSION}: {(done.stderr or done.stdout)[-500:]}"
    PLATFORM_BINARY.chmod(0o755)  # its postinstall script does this where npm runs install scripts
    return PLATFORM_BINARY


def multitool_errors(log: object) -> list[str]:
    """The Multitool's error-level results for `log` (a dict or JSON text)."""
    binary = _binary()
    if isinstance(binary, str):
        pytest.skip(binary)
    text = log if isinstance(log, str) else json.dumps(log, ensure_ascii=False)
    with tempfile.TemporaryDirectory(prefix="sarif-multitool-") as folder:
        source, output = Path(folder) / "report.sarif", Path(folder) / "validation.sarif"
        source.write_text(text, encoding="utf-8")
        done = subprocess.run(
            [str(binary), "validate", str(source), "--rule-kind", "Gh;Sarif", "--output", str(output), "--log", "ForceOverwrite"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=folder,
        )
        assert output.exists(), f"the Multitool wrote no output log (exit {done.returncode}): {done.stdout[-2000:]}"
        validation = json.loads(output.read_text(encoding="utf-8-sig"))
    results = [result for run in validation["runs"] for result in run.get("results", [])]
    return [
        f"{result['ruleId']}: {result['message'].get('arguments', result['message'].get('text'))}"
        for result in results
        if result.get("level", "warning") == "error"
    ]
