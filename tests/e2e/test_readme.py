"""The README, executed (tools/readme_walkthrough.py): on a fresh copy of the
checkout (the files git tracks, with their working-tree contents, as a clone
has them: no .venv, no state, no caches), `bash tools/dev.sh serve` starts
with its defaults from the copy's root (but IMPORTER_BUILD=pure: a compiled
build would spend a minute and a half of mypyc on what test_builds.py's
compiled wheel and this checkout's own setup already prove; .ci/run's bare
container walks with every default), the README's walkthrough blocks run in
order, each command answers the status its comment gives, and the tensors it
saved equal onnx's. A README edit that breaks an example breaks this test.

Needs curl (`bash tools/dev.sh test` installs it as root), git and a free
port 8000; skipped with the reason without the first two.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from readme_walkthrough import readme_examples, walk
from support.paths import REPO


def test_the_readme_marks_its_walkthrough() -> None:
    examples = readme_examples((REPO / "README.md").read_text(encoding="utf-8"))
    commands = [example.command for example in examples]
    assert len(examples) >= 15
    assert any("/tensors/W" in command and "npy" in command for command in commands)
    # Followed in order, the model the examples read is deleted only after them.
    deleted = next(index for index, command in enumerate(commands) if "-X DELETE" in command)
    assert all("tensors/W" not in command for command in commands[deleted + 1 :])
    assert all(example.status is not None for example in examples if example.command.startswith("curl"))
    assert all("--fail-with-body" in command for command in commands if command.startswith("curl") and " -o W." in command)


def _clean_copy(target: Path) -> Path:
    """The files git tracks (with their working-tree contents), as a fresh clone has them."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            destination = target / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
    return target


def test_the_readme_walkthrough_answers_as_the_readme_says(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("the README's examples use curl, which is not installed (bash tools/dev.sh test installs it as root)")
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("the walkthrough copies the checkout's tracked files with git, and this is not a git checkout with git installed")
    root = _clean_copy(tmp_path / "checkout")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    examples, problems = walk(root, scratch, importer_build="pure")
    assert len(examples) >= 15
    assert not problems, "\n".join(problems)
