"""Metrics of several front-end processes (`service.observability.metrics`
with `PROMETHEUS_MULTIPROC_DIR`): one scrape adds up every process's
counters and histograms, under the names one process alone exposes.
Real processes: the variable counts only when set before `prometheus_client`
is imported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[3]

FRONT_END = textwrap.dedent(
    """
    import sys
    from service.observability.metrics import Metrics

    class Store:  # the store's gauges, read at the scrape
        def model_count(self) -> int: return 7
        def usage(self) -> int: return 0
        def free_bytes(self) -> int: return 0

    metrics = Metrics(Store(), lambda: None)
    requests = int(sys.argv[1])
    for _ in range(requests):
        metrics.requests.labels(route="/models", method="GET", status="200").inc()
        metrics.request_seconds.labels(route="/models").observe(0.003)
    if requests:
        metrics.imports.labels(result="ok").inc()
        metrics.import_seconds.observe(1.5)
    print("counted", flush=True)
    sys.stdin.readline()  # scrape once every front end has counted
    sys.stdout.write(metrics.exposition()[0].decode())
    """
)


def start(requests: int, folder: Path | None) -> subprocess.Popen[str]:
    """A front end counting `requests` requests, then waiting for a line to scrape."""
    environment = {key: value for key, value in os.environ.items() if key != "PROMETHEUS_MULTIPROC_DIR"}
    environment["PYTHONPATH"] = str(REPO)
    if folder is not None:
        environment["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
    command = [sys.executable, "-c", FRONT_END, str(requests)]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=environment, cwd=REPO)


def scrapes(processes: list[subprocess.Popen[str]]) -> list[str]:
    for process in processes:
        assert process.stdout is not None and process.stdout.readline().strip() == "counted"
    outputs = [process.communicate("scrape\n", timeout=60)[0] for process in processes]
    assert [process.returncode for process in processes] == [0] * len(processes)
    return outputs


def samples(exposition: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
    }


def test_one_scrape_adds_up_every_process(tmp_path: Path) -> None:
    folder = tmp_path / "prometheus"
    folder.mkdir()
    *front, alone_scrape = scrapes([start(2, folder), start(3, folder), start(1, None)])  # the last without the variable
    for scrape in front:  # either process's scrape: the sums
        seen = samples(scrape)
        assert seen[("onnx_import_http_requests_total", (("method", "GET"), ("route", "/models"), ("status", "200")))] == 5
        assert seen[("onnx_import_http_request_duration_seconds_count", (("route", "/models"),))] == 5
        assert seen[("onnx_import_http_request_duration_seconds_bucket", (("le", "0.005"), ("route", "/models")))] == 5
        assert seen[("onnx_import_imports_total", (("result", "ok"),))] == 2
        assert seen[("onnx_import_import_duration_seconds_sum", ())] == 3.0
        assert seen[("onnx_import_store_models", ())] == 7  # the gauges read at the scrape are there too
    # The same names as one process alone, which has `_created` besides.
    assert {name for name, _ in samples(alone_scrape)} - {name for name, _ in seen} == {
        "onnx_import_imports_created",
        "onnx_import_import_duration_seconds_created",
        "onnx_import_http_requests_created",
        "onnx_import_http_request_duration_seconds_created",
    }
    assert {name for name, _ in seen} <= {name for name, _ in samples(alone_scrape)}


def test_the_variable_set_after_the_import_is_refused(tmp_path: Path) -> None:
    late = "import os, sys, prometheus_client\nos.environ['PROMETHEUS_MULTIPROC_DIR'] = sys.argv[2]\n" + FRONT_END
    environment = {key: value for key, value in os.environ.items() if key != "PROMETHEUS_MULTIPROC_DIR"}
    process = subprocess.run(
        [sys.executable, "-c", late, "0", str(tmp_path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**environment, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=60,
    )
    assert process.returncode != 0
    assert "PROMETHEUS_MULTIPROC_DIR was set after prometheus_client was imported" in process.stderr
