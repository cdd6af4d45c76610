"""The explorer's browser tests' shared parts (a pytest plugin of
tests/conftest.py): headless Chromium (Debian's package, /usr/bin/chromium)
driven by Playwright, the `browser` and `watched` fixtures, and the steps
every test takes (open the explorer, import a model, wait for its graph).

Every request the browser makes passes a route that lets through only the
loopback (127.0.0.1) and aborts and records anything else; each test ends by
checking that nothing was aborted and that no script error went uncaught.
A module of browser tests starts with `skip_without_a_browser()`: skipped,
with the reason, where Playwright or Chromium cannot be had. Screenshots go
to .cache/artifacts/explorer/, layout timings to layout-timings.json there.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from support.paths import CACHE

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Playwright, Request, Route

    from support.service_harness import ServiceProcess

ARTIFACTS = CACHE / "artifacts" / "explorer"
LOOPBACK = "127.0.0.1"
CHROMIUM = Path("/usr/bin/chromium")
LAYOUT_BUDGET_S = 30.0  # the longest any test waits for a drawing (the bounds a user relies on are asserted apart)


def browser_problem() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        from playwright._impl._driver import compute_driver_executable
    except ImportError:
        return "Playwright for Python is not installed (pip install -e '.[test]')"
    if not CHROMIUM.exists():
        return "Debian's chromium is not installed at /usr/bin/chromium (bash tools/dev.sh test installs it as root)"
    driver = compute_driver_executable()[0]  # a Node.js binary in Playwright's wheel
    try:
        ran = subprocess.run([driver, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as error:
        return f"Playwright's driver {driver} cannot start: {error}"
    if ran.returncode != 0:
        return f"Playwright's driver cannot run: {ran.stderr.strip()[:300]} (bash tools/dev.sh test installs what it lacks as root)"
    return None


def skip_without_a_browser() -> None:
    """At the top of a module of browser tests: skip it, with the reason, where they cannot run."""
    if (problem := browser_problem()) is not None:
        pytest.skip(problem, allow_module_level=True)


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    # executable_path: Debian's Chromium; Playwright never downloads a browser of its own. No host name
    # resolves but the loopback's, for whatever the browser itself might try besides the pages (whose
    # requests pass `loopback_only`).
    args = ["--disable-gpu", "--disable-quic", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
    browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=args)
    yield browser
    browser.close()


@dataclass
class Watched:
    """A page and what the guards saw on it."""

    page: Page
    context: BrowserContext
    requests: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    allowed_failures: set[int] = field(default_factory=set)  # statuses a test expects the API to answer (logged by Chromium)
    csp_refusals: list[str] = field(default_factory=list)  # what the page's Content-Security-Policy kept from loading


def loopback_only(watched: Watched) -> Any:
    def guard(route: Route, request: Request) -> None:
        host = urlsplit(request.url).hostname
        if request.url.startswith(("data:", "blob:")) or host == LOOPBACK:
            watched.requests.append(request.url)
            route.continue_()
        else:
            watched.blocked.append(request.url)
            route.abort("blockedbyclient")

    return guard


@pytest.fixture()
def watched(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1400, "height": 880}, accept_downloads=True)
    page = context.new_page()
    seen = Watched(page, context)
    context.route("**/*", loopback_only(seen))

    def on_console(message: ConsoleMessage) -> None:
        if message.type != "error":
            return
        if "violates the following Content Security Policy directive" in message.text and "The action has been blocked" in message.text:
            seen.csp_refusals.append(message.text)
            return
        if message.text.startswith("Failed to load resource: the server responded with a status of"):
            status = int(message.text.split("status of ")[1].split()[0])
            if status in seen.allowed_failures:
                return
        seen.errors.append(f"console: {message.text}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: seen.errors.append(f"uncaught: {error}"))
    yield seen
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"))
    context.close()
    assert seen.requests, "the loopback guard saw no request: it is not in force"
    assert not seen.blocked, f"requests off the loopback: {seen.blocked}"
    assert not seen.errors, seen.errors
    assert not seen.csp_refusals or request.node.name == "test_docs_list_every_operation_offline", seen.csp_refusals


# Chromium fails a load in flight with this when the host's network interfaces
# change (a container starting or stopping beside the tests adds or removes one).
NETWORK_CHANGED = "net::ERR_NETWORK_CHANGED"
OPENING_ATTEMPTS = 6  # the container tests beside it start and stop several containers in a row


def open_explorer(watched: Watched, server: ServiceProcess, url: str = "/") -> Page:
    """The explorer at `url`, its script running (the summary tab chosen by
    it). An opening that Chromium failed with NETWORK_CHANGED is tried again,
    up to OPENING_ATTEMPTS times: only then, never later in a test."""
    page = watched.page
    from playwright.sync_api import expect

    booted = page.locator("#tabs [data-tab=summary][aria-selected=true]")
    for attempt in range(1, OPENING_ATTEMPTS + 1):
        page.goto(server.url + url)
        expect(page.locator("h1")).to_have_text("ONNX explorer")
        # The script's start (30 s: a machine busy building images beside it), or one of its
        # modules failed by a network change: the whole module graph then never runs.
        deadline = time.monotonic() + 30
        while not booted.count() and not _network_change_seen(watched) and time.monotonic() < deadline:
            page.wait_for_timeout(100)
        if attempt == OPENING_ATTEMPTS or not _network_changed(watched):
            break
    expect(booted).to_have_count(1)
    return page


def _network_change_seen(watched: Watched) -> bool:
    return any(NETWORK_CHANGED in error for error in watched.errors)


def _network_changed(watched: Watched) -> bool:
    """Whether Chromium failed a load with NETWORK_CHANGED (those errors are dropped: the opening is tried again)."""
    changed = [error for error in watched.errors if NETWORK_CHANGED in error]
    watched.errors[:] = [error for error in watched.errors if NETWORK_CHANGED not in error]
    return bool(changed)


def import_path(page: Page, path: str) -> None:
    from playwright.sync_api import expect

    page.fill("#path", path)
    page.click("#path-form button")
    expect(page.locator("#tab-summary h2")).to_have_text(path)


def show_graph(page: Page) -> None:
    """After an import: the graph tab has opened by itself, and the graph is drawn."""
    from playwright.sync_api import expect

    expect(page.locator("#tab-graph")).to_be_visible()
    expect(page.locator("#tabs [data-tab=graph]")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#scene .item.node").first).to_be_visible(timeout=LAYOUT_BUDGET_S * 1000)


def record_timing(label: str, **figures: float | int | str) -> None:
    """Adds `figures` under `label` to layout-timings.json in the artefacts (written whole, then renamed)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / "layout-timings.json"
    known = json.loads(path.read_text()) if path.exists() else {}
    known[label] = figures
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    part.write_text(json.dumps(known, indent=1) + "\n")
    os.replace(part, path)
    print(f"{label}: {figures}")


FIRST_SCREEN = """() => {
    const canvas = document.querySelector("#canvas").getBoundingClientRect();
    const seen = (element) => {
        const r = element.getBoundingClientRect();
        return r.width > 0 && r.right > canvas.left && r.left < canvas.right && r.bottom > canvas.top && r.top < canvas.bottom;
    };
    const screen = { inputs: [], ops: [], fills: [], labels: [] };
    for (const group of document.querySelectorAll("#scene .item")) {
        const box = group.querySelector(":scope > rect");
        if (!box || !seen(box)) continue;
        if (group.classList.contains("node")) {
            screen.ops.push(group.querySelector(":scope > text.head").textContent);
            screen.fills.push(getComputedStyle(box).fill);
        } else if (group.classList.contains("input")) screen.inputs.push(group.dataset.value);
    }
    for (const label of document.querySelectorAll("#scene .edge-label")) {
        if (getComputedStyle(label).display !== "none" && seen(label)) {
            screen.labels.push({ text: label.textContent, inferred: label.classList.contains("inferred") });
        }
    }
    return screen;
}"""


def first_screen(page: Page) -> dict[str, Any]:
    """What the graph's canvas shows as drawn: the graph inputs' names, the op
    types and fills of the node boxes, and the edge labels (each with whether
    its type was inferred), of every box and label inside the canvas."""
    screen: dict[str, Any] = page.evaluate(FIRST_SCREEN)
    return screen
