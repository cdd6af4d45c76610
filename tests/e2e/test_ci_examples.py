"""The CI examples users copy: the pre-commit hook (.pre-commit-hooks.yaml)
and the GitHub Actions workflow (docs/ci/github-actions.yml), each run here.

The hook runs through pre-commit itself (the `test` extra installs it), from a
local clone of this repository's HEAD in a temporary folder: pre-commit makes
its own venv and installs the package into it with pip (its configured index),
so this is a process test by nature; a passing model passes the hook and a
failing one fails it. The workflow's `run:` steps (but the install: this
venv is that install) run with bash on sample models under models/, as the
runner would run them, and the report they leave is what its upload-sarif
step names: a SARIF log GitHub's rules find no error in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import onnx
import pytest
import yaml
from onnx import TensorProto, helper
from support.paths import REPO
from support.sarif_multitool import multitool_errors
from support.sarif_schema import valid_sarif
from support.service_harness import SAMPLES

WORKFLOW = REPO / "docs" / "ci" / "github-actions.yml"
HOOKS = REPO / ".pre-commit-hooks.yaml"
VENV_BIN = Path(sys.executable).parent


def wrong_type(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "wrong_type",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [1, 2])],
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _environment() -> dict[str, str]:
    return {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def _steps() -> list[dict[str, Any]]:
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    (job,) = workflow["jobs"].values()
    steps: list[dict[str, Any]] = job["steps"]
    return steps


def _run_steps(folder: Path) -> list[int]:
    statuses = []
    for step in _steps():
        if "run" in step and step.get("id") != "install":
            done = subprocess.run(
                ["bash", "-e", "-c", step["run"]], cwd=folder, env=_environment(), capture_output=True, text=True, timeout=600
            )
            statuses.append(done.returncode)
    return statuses


def test_the_workflow_uploads_the_report_its_check_step_writes() -> None:
    steps = _steps()
    (upload,) = [step for step in steps if str(step.get("uses", "")).startswith("github/codeql-action/upload-sarif@")]
    (check,) = [step for step in steps if step.get("id") == "check"]
    assert "--format sarif" in check["run"] and f"--output {upload['with']['sarif_file']}" in check["run"]
    assert upload["if"].startswith("always()")  # the report goes up whatever the verdict
    assert yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["permissions"]["security-events"] == "write"


def test_the_workflow_run_steps_on_sample_models(tmp_path: Path) -> None:
    shutil.copytree(SAMPLES / "external", tmp_path / "models" / "external")
    shutil.copy(SAMPLES / "add.onnx", tmp_path / "models" / "add.onnx")
    assert _run_steps(tmp_path) == [0]
    log = valid_sarif((tmp_path / "onnx-import.sarif").read_text(encoding="utf-8"))
    assert [artifact["location"]["uri"] for artifact in log["runs"][0]["artifacts"]] == ["models/add.onnx", "models/external/model.onnx"]
    assert log["runs"][0]["results"] == []

    wrong_type(tmp_path / "models" / "vad" / "model.onnx")
    assert _run_steps(tmp_path) == [1]  # the job fails; the report is still written for the upload
    log = valid_sarif((tmp_path / "onnx-import.sarif").read_text(encoding="utf-8"))
    placed = {result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for result in log["runs"][0]["results"]}
    assert placed == {"models/vad/model.onnx"}
    assert multitool_errors(log) == []


def test_the_pre_commit_hook_passes_a_sound_model_and_fails_a_wrong_one(tmp_path: Path) -> None:
    """A process: pre-commit builds the hook's own venv from a clone of HEAD."""
    pre_commit = VENV_BIN / "pre-commit"
    if not pre_commit.exists():
        pytest.skip("pre-commit is not installed (the test extra brings it)")
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip(
            "pre-commit installs a hook from a git repository, with git: this checkout is not one (a copy without .git)"
            " or git is not installed; a clone with git installed runs it"
        )
    (hook,) = yaml.safe_load(HOOKS.read_text(encoding="utf-8"))
    assert (hook["id"], hook["entry"], hook["language"], hook["files"]) == ("onnx-import-check", "onnx-import check", "python", r"\.onnx$")
    clone = tmp_path / "hooks"
    subprocess.run(["git", "clone", "-q", "--no-local", str(REPO), str(clone)], check=True, timeout=300)
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    models = tmp_path / "models"
    models.mkdir()
    subprocess.run(["git", "init", "-q", str(models)], check=True)
    shutil.copy(SAMPLES / "add.onnx", models / "add.onnx")
    wrong_type(models / "wrong.onnx")
    config = {"repos": [{"repo": str(clone), "rev": head, "hooks": [{"id": "onnx-import-check"}]}]}
    (models / ".pre-commit-config.yaml").write_text(json.dumps(config), encoding="utf-8")
    subprocess.run(["git", "-C", str(models), "add", "."], check=True)
    environment = {**_environment(), "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "IMPORTER_BUILD": "pure"}

    def hook_on(name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(pre_commit), "run", "onnx-import-check", "--files", name],
            cwd=models,
            env=environment,
            capture_output=True,
            text=True,
            timeout=1200,
        )

    passed = hook_on("add.onnx")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Passed" in passed.stdout
    failed = hook_on("wrong.onnx")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "Failed" in failed.stdout and "declared-type-conflict" in failed.stdout
