"""The explorer against Netron 9.x, side by side in one run (issue 23).

Both viewers draw the five held-in models (tests/support/held_in_models.py:
PaddleOCR's classifier, detector and recogniser, and generated graphs of
5,000 and 50,000 nodes) in headless Chromium (Debian's /usr/bin/chromium,
driven by Playwright; every request off 127.0.0.1 aborted and counted), each
run in a fresh browser context (no cookie, cache or storage shared), the
viewers alternating first and second from round to round. Per run:

- time to first drawing, read in the page (`performance.now()`, checked every
  animation frame: the first frame in which the drawing is there).
  The explorer (the real service, `python -m service`, on a temporary store,
  its data root the models' folder): the page loaded, then from the import's
  submit (`#path` filled, `#path-form button` clicked: the import opens the
  Graph tab) to the first frame with `#canvas[data-drawn=true]`; a 50,000-node
  graph is drawn 5,000 nodes a page, its first page is measured. Each model is
  imported once before the timed rounds (that first import, with the server's
  import, check stages and graph document, is reported apart); a timed import
  is answered from the store. Netron (its wheel's viewer, served by its own
  Python server for that one model): from navigation to the first frame with
  the body's class `default` and node groups in `#origin .nodes`. Netron's
  consent dialog is not met (a `consent` cookie is set, as a returning user
  has it); its large-graph notice (after 2.5 s of layout, its only button
  "Cancel") is left alone as a user who waits leaves it, and is reported.
- the drawing's width and height at scale 1, in its own units. The
  explorer: its layout's (the worker's dagre result), which the canvas gives
  as `data-width` and `data-height` (only the boxes near the view are in the
  page: a bounding box would measure those). Netron: `getBBox()` of
  `#origin`, the group holding all of its drawing, in that group's own
  coordinates (its pan and zoom transform left out): the extent of its boxes
  and edges, as dagre placed them.
- nodes laid out and drawn (the explorer's `data-nodes`; Netron's
  `#origin .nodes > .node.graph-node`) and those in the page (the explorer's
  `#scene .item.node`), the explorer's worker layout time (`data-layout-ms`),
  and the longest main-thread task between the start and the drawing
  (PerformanceObserver 'longtask').
- a warm reopen: the same model opened again in a new page of the same
  context (its HTTP cache and storage kept: the explorer's layouts kept in
  IndexedDB, whether it drew from one is its canvas's `data-stored`).

Figures are medians of --runs rounds; ratios are explorer / Netron.

With --screenshots DIR, each viewer's first screen of each model (as it
opens, its first round) is saved there as MODEL-VIEWER.png.

Usage: python bench/explorer_bench.py [--runs 3] [--big-runs 3] [--only NAME,...] [--timeout 900]
       [--no-warm] [--wait-load 1.2] [--json FILE] [--screenshots DIR]
       python bench/explorer_bench.py --from-json FILE   (the table of a saved run)
Needs the test extra (Playwright, onnx) and netron 9.3.3: pip install netron==9.3.3
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

REPO = Path(__file__).resolve().parent.parent
# The checkout first: tests/importer (a folder of tests) must not hide the importer; tools/ for what tests/support imports.
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tools")]


def support_module(name: str) -> Any:
    """A module of tests/support, imported at run time (mypy checks this script alone, without tests/ on its path)."""
    return importlib.import_module(f"support.{name}")


_browser, _held_in, _harness = (support_module(name) for name in ("explorer_browser", "held_in_models", "service_harness"))
CHROMIUM: Path = _browser.CHROMIUM  # Debian's chromium
LOOPBACK: str = _browser.LOOPBACK
browser_problem: Callable[[], str | None] = _browser.browser_problem  # why the browser cannot run here, or None
held_in_models: Callable[[], dict[str, Path]] = _held_in.held_in_models  # the five models, fetched or made on first use
NODES: dict[str, int] = _held_in.NODES
free_port: Callable[[], int] = _harness.free_port
serving: Callable[..., contextlib.AbstractContextManager[Any]] = _harness.serving  # a started `python -m service`

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, Route, ViewportSize

NETRON_VERSION = "9.3.3"
VIEWPORT: ViewportSize = {"width": 1400, "height": 880}
BIG = 20_000  # nodes: a model this large gets --big-runs rounds
CHROMIUM_ARGS = ["--disable-gpu", "--disable-quic", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]

# In every page before its own scripts: long tasks, and a check every animation frame
# that notes when the drawing is first there (window.__bench.drawnAt) and what dialogs showed.
WATCH_SCRIPT = """
(() => {
  const bench = (window.__bench = { longTasks: [], drawnAt: null, askedAt: null, dialogs: [], failed: null });
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) bench.longTasks.push([entry.startTime, entry.duration]);
  }).observe({ type: "longtask", buffered: true });
  document.addEventListener("submit", () => { bench.askedAt = performance.now(); bench.drawnAt = null; }, true);
  const explorerDrawn = () => bench.askedAt !== null && document.querySelector("#canvas[data-drawn=true]") !== null;
  const netronDrawn = () => document.body.classList.contains("default") && document.querySelector("#origin .nodes > .node") !== null;
  const frame = () => {
    if (document.body) {
      const message = document.getElementById("message-text");  // Netron's dialogs
      const shown = document.body.classList.contains("notification") || document.body.classList.contains("alert");
      if (message && shown && message.innerText && !bench.dialogs.some((d) => d.text === message.innerText)) {
        bench.dialogs.push({ text: message.innerText, at: performance.now() });
      }
      if (message && document.body.classList.contains("alert")) bench.failed = message.innerText;
      if (bench.drawnAt === null && (VIEWER === "explorer" ? explorerDrawn() : netronDrawn())) bench.drawnAt = performance.now();
    }
    requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);
})();
"""

# Netron replaces window.eval with a function that throws; Playwright's evaluate needs it. Kept
# (Netron itself never calls eval: its drawing is not touched).
KEEP_EVAL_SCRIPT = """
(() => {
  const evaluate = window.eval;
  Object.defineProperty(window, "eval", { get: () => evaluate, set: () => {}, configurable: false });
})();
"""

# After the drawing: its size and nodes (the explorer's canvas says them of its layout; Netron's are all in
# the page, its size the box of its drawing's group) and the longest task since the start.
READ_DRAWING = """
([group, nodes, start]) => {
  const bench = window.__bench;
  const box = document.querySelector(group).getBBox();
  const tasks = bench.longTasks.filter(([at]) => at >= start - 1 && at <= bench.drawnAt).map(([, duration]) => duration);
  const canvas = document.querySelector("#canvas");
  const said = (name) => (canvas && canvas.dataset[name] !== undefined ? Number(canvas.dataset[name]) : null);
  const inPage = document.querySelectorAll(nodes).length;
  return {
    drawnAt: bench.drawnAt, width: said("width") ?? box.width, height: said("height") ?? box.height, nodes: said("nodes") ?? inPage,
    nodesInPage: inPage, longestTaskMs: tasks.length ? Math.max(...tasks) : 0, dialogs: bench.dialogs,
    modelRequestAt: (performance.getEntriesByType("resource").find((r) => r.name.includes("/data/")) || {}).startTime ?? null,
    layoutMs: said("layoutMs"),
    stored: canvas && canvas.dataset.stored ? canvas.dataset.stored === "true" : null,
  };
}
"""


@dataclass
class Drawing:
    """One opening of one model in one viewer."""

    seconds: float  # start (the import's submit; Netron: navigation) to the first frame with the drawing
    width: float
    height: float
    nodes: int  # laid out (and drawn, in the page or not)
    nodes_in_page: int  # node elements in the page (the explorer makes those near the view only)
    longest_task_ms: float
    layout_ms: float | None = None  # the explorer's worker layout
    layout_stored: bool | None = None  # the explorer: the layout read from the browser's storage, not made
    page_load_s: float | None = None  # the explorer: navigation to the load event, before the import
    model_request_s: float | None = None  # Netron: navigation to the start of its request for the model file
    dialogs: list[str] = field(default_factory=list)


@dataclass
class ViewerResult:
    cold: list[Drawing] = field(default_factory=list)
    warm: list[Drawing] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    blocked_hosts: list[str] = field(default_factory=list)  # requests off the loopback, aborted
    first_import: Drawing | None = None  # the explorer: the model's first import (server import, checks, graph document)


@dataclass
class ModelResult:
    name: str
    nodes: int
    megabytes: float
    explorer: ViewerResult = field(default_factory=ViewerResult)
    netron: ViewerResult = field(default_factory=ViewerResult)
    load_average: list[float] = field(default_factory=list)  # 1-minute, before and after its rounds


class DrawingFailed(RuntimeError):
    pass


# --- the browser side


def loopback_only(blocked: list[str]) -> Callable[[Route], None]:
    def guard(route: Route) -> None:
        url = route.request.url
        host = urlsplit(url).hostname
        if url.startswith(("data:", "blob:")) or host == LOOPBACK:
            route.continue_()
        else:
            if host not in blocked:
                blocked.append(str(host))
            route.abort("blockedbyclient")

    return guard


@contextlib.contextmanager
def fresh_context(browser: Browser, viewer: str, result: ViewerResult, url: str) -> Iterator[BrowserContext]:
    context = browser.new_context(viewport=VIEWPORT)
    context.route("**/*", loopback_only(result.blocked_hosts))
    context.add_init_script(WATCH_SCRIPT.replace("VIEWER", json.dumps(viewer)))
    if viewer == "netron":  # a returning user: Netron's cookie notice was answered before
        context.add_init_script(KEEP_EVAL_SCRIPT)
        context.add_cookies([{"name": "consent", "value": str(int(time.time() * 1000)), "url": url}])
    try:
        yield context
    finally:
        context.close()


def wait_drawn(page: Page, timeout_s: float) -> None:
    page.wait_for_function("() => window.__bench.drawnAt !== null || window.__bench.failed !== null", timeout=timeout_s * 1000, polling=250)
    failed = page.evaluate("() => window.__bench.failed")
    if failed:
        raise DrawingFailed(f"the viewer showed an error: {failed}")


def read_drawing(page: Page, group: str, nodes: str, start_ms: float) -> Drawing:
    figures: dict[str, Any] = page.evaluate(READ_DRAWING, [group, nodes, start_ms])
    return Drawing(
        seconds=(figures["drawnAt"] - start_ms) / 1000,
        width=round(figures["width"], 1),
        height=round(figures["height"], 1),
        nodes=int(figures["nodes"]),
        nodes_in_page=int(figures["nodesInPage"]),
        longest_task_ms=round(figures["longestTaskMs"], 1),
        layout_ms=figures["layoutMs"],
        layout_stored=figures["stored"],
        model_request_s=None if figures["modelRequestAt"] is None else round(figures["modelRequestAt"] / 1000, 3),
        dialogs=[f"{dialog['text']} (at {dialog['at'] / 1000:.1f} s)" for dialog in figures["dialogs"]],
    )


def screenshot(page: Page, shot: Path | None) -> None:
    """The first screen as the viewer opened it (its drawing finished: half a second more for the last chunks)."""
    if shot is not None:
        page.wait_for_timeout(500)
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot))


def explorer_drawing(context: BrowserContext, url: str, model: str, timeout_s: float, shot: Path | None = None) -> Drawing:
    page = context.new_page()
    page.goto(url + "/")
    page.wait_for_selector("#path-form button")
    page_load_s = float(page.evaluate("() => performance.getEntriesByType('navigation')[0].loadEventEnd")) / 1000
    page.fill("#path", model)
    page.click("#path-form button")
    wait_drawn(page, timeout_s)
    start_ms = float(page.evaluate("() => window.__bench.askedAt"))
    drawing = read_drawing(page, "#scene", "#scene .item.node", start_ms)
    drawing.page_load_s = round(page_load_s, 3)
    drawing.model_request_s = None  # Netron's figure
    screenshot(page, shot)
    page.close()
    return drawing


def netron_drawing(context: BrowserContext, url: str, timeout_s: float, shot: Path | None = None) -> Drawing:
    page = context.new_page()
    page.goto(url + "/")
    wait_drawn(page, timeout_s)
    drawing = read_drawing(page, "#origin", "#origin .nodes > .node.graph-node", 0.0)
    screenshot(page, shot)
    page.close()
    return drawing


def layout_storage(context: BrowserContext, url: str) -> list[str]:
    """The IndexedDB databases the explorer's origin holds after a drawing (a layout cache would be one)."""
    page = context.new_page()
    page.goto(url + "/")
    names: list[str] = page.evaluate("async () => (await indexedDB.databases()).map((d) => d.name)")
    page.close()
    return names


# --- the servers


@contextlib.contextmanager
def netron_serving(model: Path) -> Iterator[str]:
    """Netron's own server for one model (its wheel's viewer and /data/<file>), on a free loopback port
    (`python -m netron` lacks a __main__ module in the wheel: its command's entry point is called)."""
    port = free_port()
    log = Path(tempfile.gettempdir()) / f"explorer-bench-netron-{port}.log"
    command = [
        sys.executable,
        "-c",
        "import netron; netron.main()",
        str(model),
        "--port",
        str(port),
        "--host",
        LOOPBACK,
        "--verbosity",
        "quiet",
    ]
    with log.open("ab") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    url = f"http://{LOOPBACK}:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"netron exited with {process.returncode}: {log.read_text()[-600:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("netron's server did not answer in 30 s")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(10)
        log.unlink(missing_ok=True)


# --- the run


def measure_model(
    browser: Browser, explorer_url: str, model: Path, result: ModelResult, runs: int, timeout_s: float, warm: bool, shots: Path | None
) -> None:
    """The model's first import, then `runs` rounds: each viewer cold (and warm) once, the first of them alternating;
    with `shots`, each viewer's first screen of the first round saved there (MODEL-VIEWER.png)."""
    result.load_average.append(round(os.getloadavg()[0], 2))
    with fresh_context(browser, "explorer", result.explorer, explorer_url) as context:  # the first import, apart from the medians
        result.explorer.first_import = explorer_drawing(context, explorer_url, model.name, timeout_s)
        if stored := layout_storage(context, explorer_url):
            result.explorer.notes.append(f"IndexedDB databases after a drawing: {', '.join(stored)}")
    with netron_serving(model) as netron_url:
        viewers: dict[str, tuple[str, ViewerResult, Callable[[BrowserContext, Path | None], Drawing]]] = {
            "explorer": (
                explorer_url,
                result.explorer,
                lambda context, shot: explorer_drawing(context, explorer_url, model.name, timeout_s, shot),
            ),
            "netron": (netron_url, result.netron, lambda context, shot: netron_drawing(context, netron_url, timeout_s, shot)),
        }
        for round_number in range(runs):
            for name in ("explorer", "netron") if round_number % 2 == 0 else ("netron", "explorer"):
                url, figures, draw = viewers[name]
                shot = shots / f"{model.stem}-{name}.png" if shots is not None and round_number == 0 else None
                try:
                    with fresh_context(browser, name, figures, url) as context:
                        figures.cold.append(draw(context, shot))
                        if warm:
                            figures.warm.append(draw(context, None))
                except Exception as error:  # a timeout or an error shown: reported, the other viewer still measured
                    figures.failures.append(f"round {round_number + 1}: {type(error).__name__}: {str(error).splitlines()[0][:300]}")
            print(f"  {result.name} round {round_number + 1}: {round_summary(result)}", flush=True)
    result.load_average.append(round(os.getloadavg()[0], 2))


def round_summary(result: ModelResult) -> str:
    def last(viewer: ViewerResult) -> str:
        return f"{viewer.cold[-1].seconds:.2f} s" if viewer.cold else "none"

    return f"explorer {last(result.explorer)}, Netron {last(result.netron)}"


def median(drawings: list[Drawing], figure: str) -> float | None:
    values = [getattr(d, figure) for d in drawings if getattr(d, figure) is not None]
    return statistics.median(values) if values else None


def quiet_enough(limit: float, patience_s: float) -> float:
    """Waits (up to patience_s) for the 1-minute load average to fall under limit; returns it."""
    deadline = time.monotonic() + patience_s
    while (load := os.getloadavg()[0]) >= limit and time.monotonic() < deadline:
        print(f"load {load:.2f} >= {limit}: waiting", flush=True)
        time.sleep(60)
    return load


# --- the report


def seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


def size(drawings: list[Drawing]) -> str:
    width, height = median(drawings, "width"), median(drawings, "height")
    return "—" if width is None or height is None else f"{width:,.0f} × {height:,.0f}"


def ratio(top: float | None, bottom: float | None) -> str:
    return "—" if top is None or not bottom else f"{top / bottom:.2f}"


def print_tables(results: list[ModelResult]) -> None:
    print("| model | nodes | explorer: first drawing (its layout) | Netron: first drawing | ratio "
          "| explorer: drawing w × h, nodes (in the page) | Netron: drawing w × h, nodes | longest task, explorer / Netron |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        ours, theirs = r.explorer.cold, r.netron.cold
        ours_s, theirs_s, layout_ms = median(ours, "seconds"), median(theirs, "seconds"), median(ours, "layout_ms")
        print(
            f"| {r.name} | {r.nodes:,} | {seconds(ours_s)}{f' ({layout_ms / 1000:.2f} s)' if layout_ms is not None else ''} "
            f"| {seconds(theirs_s)} | **{ratio(ours_s, theirs_s)}** | {size(ours)}, {median(ours, 'nodes') or 0:,.0f} "
            f"({median(ours, 'nodes_in_page') or 0:,.0f}) "
            f"| {size(theirs)}, {median(theirs, 'nodes') or 0:,.0f} "
            f"| {median(ours, 'longest_task_ms') or 0:,.0f} / {median(theirs, 'longest_task_ms') or 0:,.0f} ms |"
        )
    print()
    print("| model | explorer: page load; first import | explorer: warm reopen (layout kept) "
          "| Netron: model request at; from it to the drawing | Netron: warm reopen | Netron's dialogs |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        first = r.explorer.first_import
        kept = sum(bool(d.layout_stored) for d in r.explorer.warm)
        request_s, theirs_s = median(r.netron.cold, "model_request_s"), median(r.netron.cold, "seconds")
        drawing_after_request = None if request_s is None or theirs_s is None else theirs_s - request_s
        dialogs = sorted({dialog.split(" (at")[0] for d in r.netron.cold + r.netron.warm for dialog in d.dialogs})
        print(
            f"| {r.name} | {seconds(median(r.explorer.cold, 'page_load_s'))}; {seconds(first.seconds if first else None)} "
            f"| {seconds(median(r.explorer.warm, 'seconds'))} ({kept} of {len(r.explorer.warm)}) "
            f"| {seconds(request_s)}; {seconds(drawing_after_request)} | {seconds(median(r.netron.warm, 'seconds'))} "
            f"| {'; '.join(dialogs) or 'none'} |"
        )
    print()
    for r in results:
        for name, viewer in (("explorer", r.explorer), ("Netron", r.netron)):
            runs = ", ".join(f"{d.seconds:.2f}" for d in viewer.cold)
            print(f"{r.name}, {name}: cold runs {runs or 'none'} s; failures {viewer.failures or 'none'}; notes {viewer.notes or 'none'}; "
                  f"requests off the loopback, aborted: {viewer.blocked_hosts or 'none'}")  # fmt: skip


def machine() -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "netron": importlib.metadata.version("netron"),
        "playwright": importlib.metadata.version("playwright"),
        "chromium": subprocess.run([str(CHROMIUM), "--version"], capture_output=True, text=True).stdout.strip(),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip(),
        "explorer_uncommitted": subprocess.run(  # the explorer served is the working tree's
            ["git", "status", "--porcelain", "service/ui"], cwd=REPO, capture_output=True, text=True
        ).stdout.splitlines(),
    }


def load_results(path: Path) -> list[ModelResult]:
    def viewer(saved: dict[str, Any]) -> ViewerResult:
        first = saved.pop("first_import")
        return ViewerResult(
            cold=[Drawing(**d) for d in saved.pop("cold")],
            warm=[Drawing(**d) for d in saved.pop("warm")],
            first_import=Drawing(**first) if first else None,
            **saved,
        )

    models = json.loads(path.read_text())["models"]
    return [
        ModelResult(m["name"], m["nodes"], m["megabytes"], viewer(m["explorer"]), viewer(m["netron"]), m["load_average"]) for m in models
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds per model (each viewer once a round, cold and warm)")
    parser.add_argument("--big-runs", type=int, default=3, help=f"rounds for a model of more than {BIG:,} nodes (Netron: a minute each)")
    parser.add_argument("--only", default="", help="comma-separated model names (paddleocr_cls.onnx, blocks_5000.onnx, ...)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a viewer may take to draw one model")
    parser.add_argument("--no-warm", action="store_true", help="skip the warm reopen")
    parser.add_argument("--wait-load", type=float, default=0.0, help="first wait, up to 25 minutes, for the load average to fall below it")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--screenshots", type=Path, help="save each viewer's first screen of each model here (the first round's)")
    parser.add_argument("--from-json", type=Path, help="print the table of a saved run and exit")
    args = parser.parse_args()
    if args.from_json:
        print_tables(load_results(args.from_json))
        return 0
    if importlib.util.find_spec("netron") is None:
        print(f"netron is not installed: .venv/bin/pip install netron=={NETRON_VERSION}", file=sys.stderr)
        return 2
    if (problem := browser_problem()) is not None:
        print(problem, file=sys.stderr)
        return 2
    if importlib.metadata.version("netron") != NETRON_VERSION:
        print(f"note: netron {importlib.metadata.version('netron')} installed; the figures in bench/README.md are of {NETRON_VERSION}")
    paths = held_in_models()
    wanted = [name for name in args.only.split(",") if name] or list(paths)
    load = quiet_enough(args.wait_load, 25 * 60) if args.wait_load else os.getloadavg()[0]
    print(f"load average at the start: {load:.2f}", flush=True)
    results = [ModelResult(name, NODES[name], round(paths[name].stat().st_size / 1e6, 2)) for name in wanted]
    from playwright.sync_api import sync_playwright

    with (
        tempfile.TemporaryDirectory(prefix="explorer-bench-") as scratch,
        serving(Path(scratch) / "store", paths[wanted[0]].parent) as service,
        sync_playwright() as driver,
    ):
        browser = driver.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        for result in results:
            print(f"{result.name} ({result.nodes:,} nodes, {result.megabytes} MB)", flush=True)
            runs = args.big_runs if result.nodes > BIG else args.runs
            measure_model(browser, service.url, paths[result.name], result, runs, args.timeout, not args.no_warm, args.screenshots)
        browser.close()
    ending_load = os.getloadavg()
    print_tables(results)
    print(f"load average at the end: {ending_load[0]:.2f} (5 min {ending_load[1]:.2f}, 15 min {ending_load[2]:.2f})")
    if args.json:
        figures = {"machine": machine(), "load_at_start": load, "load_at_end": ending_load, "models": [asdict(r) for r in results]}
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
