"""A `Loop` of 10^15 trips (a 290-byte model) holds no worker for long.

- The check worker (run here, in process) does not smoke-run a model whose
  Loop runs past --max-loop-trips with nothing to end it sooner: `smoke` is
  skipped, naming the finding, its place and the setting; the runtime load
  still runs. A while-loop (its body computes its condition) is run. Both
  settings travel in the job: the bound to the refusal, the smoke run's CPU
  budget to the run.
- The service's settings declare both, and its jobs carry them.
- Through the sandboxed `onnx-import check`: the 10^15 model fails on
  `security` with `smoke` skipped within seconds; allowed by
  --max-loop-trips, its smoke run is stopped by --smoke-cpu-seconds inside
  the real worker (whose limits forbid new threads: the run's watchdog is
  started before them), and the stage is incomplete.
"""

from __future__ import annotations

import json
import subprocess
import sys
from multiprocessing import Pipe
from pathlib import Path

import onnx
import pytest
from support.loop_models import ENDLESS_TRIPS, constant_loop, while_loop

import importer
from service.checks.stages import in_worker
from service.sandbox.protocol import WorkerJob
from service.sandbox.supervisor import Sandbox
from service.settings import Settings, load_settings
from service.settings.kinds import SettingsError

pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (the `runtime` extra)")

COMMAND = Path(sys.executable).with_name("onnx-import")
ALL = "schema,security,shape,runtime,smoke"


def _saved(tmp_path: Path, model: onnx.ModelProto, name: str = "loop.onnx") -> Path:
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def _check_worker(path: Path, **limits: object) -> dict[str, dict[str, object]]:
    """The check worker's runtime and smoke stages on the model at `path`, run here: each report as sent."""
    job = WorkerJob("checks", 1 << 30, 60, 10, checks=("runtime", "smoke"), **limits)  # type: ignore[arg-type]
    reading, writing = Pipe(duplex=False)
    with importer.load_model(path) as model:
        in_worker.send_checks(writing, model, job, "test")
    reports: dict[str, dict[str, object]] = {}
    while reading.poll():
        report = json.loads(reading.recv_bytes())
        if "stage" in report:
            reports[report["stage"]] = report
    return reports


# --- the check worker, in process


def test_the_check_worker_does_not_smoke_run_a_loop_that_nothing_ends_sooner(tmp_path: Path) -> None:
    reports = _check_worker(_saved(tmp_path, constant_loop()))
    assert reports["runtime"]["status"] == "pass"  # the session is made: only the run is refused
    assert reports["smoke"]["status"] == "skipped"
    reason = str(reports["smoke"]["reason"])
    assert "loop-trip-count" in reason and "ModelProto.graph.node[0]" in reason and "--max-loop-trips" in reason, reason


def test_the_check_worker_runs_a_while_loop(tmp_path: Path) -> None:
    reports = _check_worker(_saved(tmp_path, while_loop(10)))
    assert (reports["runtime"]["status"], reports["smoke"]["status"]) == ("pass", "pass"), reports


def test_the_jobs_bound_and_budget_reach_the_refusal_and_the_run(tmp_path: Path) -> None:
    path = _saved(tmp_path, constant_loop())
    reports = _check_worker(path, max_loop_trips=ENDLESS_TRIPS, smoke_cpu_seconds=0.5)  # allowed: run, within its budget
    assert reports["smoke"]["status"] == "incomplete"
    assert reports["smoke"]["reason"] == "the smoke run used its 0.5 CPU-seconds (--smoke-cpu-seconds) without finishing"


# --- the settings


def test_the_settings_declare_the_bound_and_the_budget_and_the_jobs_carry_them() -> None:
    defaults = Settings()
    assert (defaults.max_loop_trips, defaults.smoke_cpu_seconds) == (1_000_000, 3.0)
    assert (WorkerJob("checks", 1, 1, 1).max_loop_trips, WorkerJob("checks", 1, 1, 1).smoke_cpu_seconds) == (1_000_000, 3.0)
    settings = load_settings(["--max-loop-trips", "7", "--smoke-cpu-seconds", "1.5"], environ={})
    job = Sandbox(settings).job("checks")
    assert (job.max_loop_trips, job.smoke_cpu_seconds) == (7, 1.5)
    assert load_settings([], {"ONNX_SERVICE_SMOKE_CPU_SECONDS": "2"}).smoke_cpu_seconds == 2.0


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--smoke-cpu-seconds", "0"), ("--smoke-cpu-seconds", "86401"), ("--smoke-cpu-seconds", "nan"), ("--max-loop-trips", "0")],
)
def test_settings_out_of_their_range_are_refused(flag: str, value: str) -> None:
    with pytest.raises(SettingsError, match=flag):
        load_settings([flag, value], environ={})


# --- through the sandboxed command


def _command(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert COMMAND.exists(), "the console script is installed with the project (pyproject.toml [project.scripts])"
    return subprocess.run([str(COMMAND), *map(str, args)], capture_output=True, text=True, timeout=300)


def test_the_command_fails_the_endless_loop_at_once_without_running_it(tmp_path: Path) -> None:
    done = _command("check", _saved(tmp_path, constant_loop()), "--checks", ALL)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    checks = report["checks"]
    assert report["verdict"] == "fail" and checks["security"]["status"] == "fail"
    assert (checks["runtime"]["status"], checks["smoke"]["status"]) == ("pass", "skipped")
    assert "--max-loop-trips" in checks["smoke"]["reason"]  # skipped, never run (nor stopped at the worker's limits)
    (finding,) = [item for item in report["diagnostics"] if item["code"] == "loop-trip-count"]
    assert (finding["stage"], finding["severity"], finding["field_path"], finding["node_name"]) == (
        "security",
        "error",
        "ModelProto.graph.node[0]",
        "loop",
    )


def test_the_smoke_runs_budget_stops_the_loop_inside_the_sandboxed_worker(tmp_path: Path) -> None:
    model = _saved(tmp_path, constant_loop())
    done = _command("check", model, "--checks", ALL, "--max-loop-trips", str(ENDLESS_TRIPS), "--smoke-cpu-seconds", "0.5")
    assert done.returncode == 2, done.stdout + done.stderr  # incomplete
    report = json.loads(done.stdout)
    assert report["verdict"] == "incomplete" and report["checks"]["security"]["status"] == "pass"
    smoke = report["checks"]["smoke"]
    assert smoke["status"] == "incomplete"
    # stopped by its own budget (the worker's CPU limit, 60 s, would say so, and end every stage after it)
    assert smoke["reason"] == "the smoke run used its 0.5 CPU-seconds (--smoke-cpu-seconds) without finishing"


def test_the_commands_settings_are_checked_as_the_services(tmp_path: Path) -> None:
    done = _command("check", _saved(tmp_path, constant_loop(5)), "--smoke-cpu-seconds", "0")
    assert done.returncode == 64 and "--smoke-cpu-seconds" in done.stderr and not done.stdout
