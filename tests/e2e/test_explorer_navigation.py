"""Finding one's way around a large drawing in the explorer, and taking it
away: the minimap (explorer/minimap.js) and the SVG export
(explorer/svg-export.js), in headless Chromium against a real server (the
fixtures and steps of support/explorer_browser.py: only loopback requests,
no uncaught script error).

Covered: the minimap shown for a 2,000-node graph and not for add.onnx (nor
once a small model is opened after the large one); a click in it bringing
that part of the drawing on screen, a drag in it moving the view along, and a
pan of the main view moving its view rectangle; its drawing of 5,000 boxes
timed. The export: the downloaded file is well-formed XML with a viewBox
covering the layout, every box and line of text drawn (names with <, &,
quotes escaped), the arrow marker, a <style> and no script, drawn at scale 1
whatever the zoom; opened alone, it is styled as the page (screenshot in
.cache/artifacts/explorer/). Skipped, with the reason, where Playwright or
Chromium cannot be had.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.explorer_browser import ARTIFACTS, Watched, import_path, open_explorer, record_timing, show_graph, skip_without_a_browser
from support.held_in_models import block_model
from support.service_harness import ServiceProcess, copy_samples

skip_without_a_browser()

from playwright.sync_api import FloatRect, Locator, Page, Route, expect  # noqa: E402

BIG = 2000  # nodes: a drawing many screens tall
SVG = "{http://www.w3.org/2000/svg}"
MAX_MINIMAP_MS = 50.0  # the minimap's drawing of 5,000 boxes (a few ms here): the main thread is never held long
ESCAPED_NODES = ('relu <1> & "a"', "it's <b> & 'c'")  # node names, drawn as the boxes' second line
ESCAPED_WEIGHT = "w<&>\"'"  # an initializer read by one node: a row of its box


class Item(TypedDict):
    kind: str
    position: int | None
    x: float
    y: float
    width: float
    height: float


class Layout(TypedDict):
    width: float
    height: float
    items: list[Item]


# -- models and fixtures


def names_to_escape_model() -> bytes:
    """Three nodes whose names and values need escaping in XML (<, &, both quotes)."""
    weight = numpy_helper.from_array(np.ones((1, 4), dtype=np.float32), ESCAPED_WEIGHT)
    nodes = [
        helper.make_node("Relu", ["X"], ['v<&"'], name=ESCAPED_NODES[0]),
        helper.make_node("Add", ['v<&"', ESCAPED_WEIGHT], ["s'>"], name=ESCAPED_NODES[1]),
        helper.make_node("Sigmoid", ["s'>"], ["Y"], name="plain"),
    ]
    graph = helper.make_graph(
        nodes,
        "names <&> 'to' \"escape\"",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], producer_name="test_explorer_navigation")
    model.ir_version = 10
    onnx.checker.check_model(model)
    data: bytes = model.SerializeToString()
    return data


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = copy_samples(tmp_path_factory.mktemp("navigation-data") / "root")
    (root / f"blocks_{BIG}.onnx").write_bytes(block_model(BIG))
    (root / "odd names.onnx").write_bytes(names_to_escape_model())
    return root


# -- steps


def watch_layouts(page: Page) -> None:
    """Keeps the last drawing's layout (the detail of graph-view.js's "graph-drawn") as window.drawnLayout."""
    page.evaluate(
        """() => document.addEventListener("graph-drawn", (event) => {
            const { width, height, items } = event.detail;
            window.drawnLayout = { width, height, items: items.map(({ kind, position, x, y, width, height }) =>
                ({ kind, position: position === undefined ? null : position, x, y, width, height })) };
        })"""
    )


def drawn(page: Page) -> Layout:
    """Once the graph is drawn: its layout."""
    show_graph(page)
    expect(page.locator("#canvas")).to_have_attribute("data-drawn", "true", timeout=30_000)
    layout: Layout = page.evaluate("() => window.drawnLayout")
    return layout


def box_of(locator: Locator) -> FloatRect:
    box = locator.bounding_box()
    assert box is not None, locator
    return box


def centre_on_canvas(page: Page, locator: Locator) -> bool:
    if locator.count() == 0:
        return False  # far from the view: not in the page at all (explorer/culling.js)
    canvas, item = box_of(page.locator("#canvas")), box_of(locator)
    x, y = item["x"] + item["width"] / 2, item["y"] + item["height"] / 2
    return canvas["x"] <= x <= canvas["x"] + canvas["width"] and canvas["y"] <= y <= canvas["y"] + canvas["height"]


def view_rectangle(page: Page) -> list[float]:
    """The minimap's view rectangle: x, y, width, height in the minimap's pixels."""
    return [float(v) for v in (page.locator("#minimap").get_attribute("data-view") or "").split(",")]


def nearest_node(layout: Layout, x: float, y: float) -> Item:
    nodes = [i for i in layout["items"] if i["kind"] == "node"]
    return min(nodes, key=lambda i: math.hypot(i["x"] + i["width"] / 2 - x, i["y"] + i["height"] / 2 - y))


def node_group(page: Page, item: Item) -> Locator:
    return page.locator(f'#scene .item.node[data-position="{item["position"]}"]').first


# -- the minimap


def test_the_minimap_shows_a_large_drawing_and_moves_the_view(server: ServiceProcess, watched: Watched) -> None:
    page = open_explorer(watched, server)
    watch_layouts(page)
    import_path(page, "add.onnx")
    drawn(page)
    minimap = page.locator("#minimap")
    expect(minimap).to_be_hidden()  # add.onnx fits the canvas

    import_path(page, f"blocks_{BIG}.onnx")
    layout = drawn(page)
    expect(page.locator("#canvas")).to_have_attribute("data-nodes", str(BIG))
    expect(minimap).to_be_visible()
    assert minimap.get_attribute("data-items") == str(len(layout["items"]))
    big_ms = float(minimap.get_attribute("data-draw-ms") or "nan")
    map_box = box_of(minimap)
    assert map_box["width"] >= 40 and map_box["height"] >= 40
    canvas_box = box_of(page.locator("#canvas"))
    assert map_box["x"] >= canvas_box["x"] and map_box["y"] + map_box["height"] <= canvas_box["y"] + canvas_box["height"]

    # a click far down the minimap: the nodes there come on screen (the drawing opens at its top)
    fx, fy = 0.5, 0.85
    target = nearest_node(layout, fx * layout["width"], fy * layout["height"])
    group = node_group(page, target)
    assert not centre_on_canvas(page, group)
    before = page.locator("#scene").get_attribute("transform")
    page.mouse.click(map_box["x"] + fx * map_box["width"], map_box["y"] + fy * map_box["height"])
    assert page.locator("#scene").get_attribute("transform") != before
    assert centre_on_canvas(page, group), (target, box_of(group))
    # the view rectangle is now centred where the click was
    x, y, width, height = view_rectangle(page)
    size = [float(minimap.get_attribute(name) or "0") for name in ("width", "height")]
    assert abs(y + height / 2 - fy * size[1]) <= 3, (x, y, width, height, size)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "minimap.png"))

    # panning the main view (the drawing dragged up): the rectangle moves down the minimap
    before_pan = view_rectangle(page)
    start_x, start_y = canvas_box["x"] + canvas_box["width"] * 0.7, canvas_box["y"] + canvas_box["height"] * 0.6
    page.mouse.move(start_x, start_y)
    page.mouse.down()
    page.mouse.move(start_x, start_y - 300, steps=6)
    page.mouse.up()
    after_pan = view_rectangle(page)
    assert after_pan[1] > before_pan[1], (before_pan, after_pan)
    assert after_pan[2:] == before_pan[2:]  # the same scale: the same size

    # a drag in the minimap, from near its top to its middle: the view follows
    page.mouse.move(map_box["x"] + fx * map_box["width"], map_box["y"] + 0.1 * map_box["height"])
    page.mouse.down()
    page.mouse.move(map_box["x"] + fx * map_box["width"], map_box["y"] + 0.5 * map_box["height"], steps=8)
    page.mouse.up()
    x, y, width, height = view_rectangle(page)
    assert abs(y + height / 2 - 0.5 * size[1]) <= 3, (x, y, width, height, size)
    middle = nearest_node(layout, fx * layout["width"], 0.5 * layout["height"])
    assert centre_on_canvas(page, node_group(page, middle))

    # another model, small: the overview of the large one goes
    import_path(page, "add.onnx")
    drawn(page)
    expect(minimap).to_be_hidden()
    record_timing(f"minimap of {BIG} nodes", draw_ms=big_ms)


def test_the_minimap_draws_5000_boxes_quickly(server: ServiceProcess, watched: Watched) -> None:
    """The minimap's drawing of a 5,000-box layout (as graph-view.js announces one), best of three."""
    page = open_explorer(watched, server)
    timings: list[float] = page.evaluate(
        """() => {
            const items = [];
            for (let i = 0; i < 5000; i++) {
                items.push({ kind: i % 7 ? "node" : "input", x: (i % 40) * 150, y: Math.floor(i / 40) * 60, width: 120, height: 34 });
            }
            const times = [];
            for (let run = 0; run < 3; run++) {
                document.dispatchEvent(new CustomEvent("graph-drawn", { detail: { width: 6000, height: 7500, items, edges: [] } }));
                times.push(Number(document.querySelector("#minimap").dataset.drawMs));
            }
            return times;
        }"""
    )
    record_timing("minimap of 5000 boxes", best_ms=min(timings), worst_ms=max(timings))
    assert min(timings) < MAX_MINIMAP_MS, timings


# -- the SVG export


def exported(page: Page, folder: Path) -> tuple[str, bytes]:
    with page.expect_download() as download:
        page.click("#export-svg")
    name = download.value.suggested_filename
    saved = folder / name
    download.value.save_as(saved)
    return name, saved.read_bytes()


def classes(element: ET.Element) -> list[str]:
    return (element.get("class") or "").split()


def test_the_drawing_is_exported_as_a_standalone_svg(server: ServiceProcess, watched: Watched, tmp_path: Path) -> None:
    page = open_explorer(watched, server)
    watch_layouts(page)
    import_path(page, "odd names.onnx")
    layout = drawn(page)
    page.click("#zoom-in")  # the view's zoom is not the file's
    page.click("#zoom-in")
    name, data = exported(page, tmp_path)
    assert name == "odd_names.svg"

    root = ET.fromstring(data)  # well-formed, or this raises
    assert root.tag == f"{SVG}svg"
    left, top, width, height = (float(v) for v in (root.get("viewBox") or "").split())
    assert left <= 0 and top <= 0 and left + width >= layout["width"] and top + height >= layout["height"]
    assert width - layout["width"] <= 100 and height - layout["height"] <= 100  # a margin, no more
    assert float(root.get("width") or 0) == width and float(root.get("height") or 0) == height  # scale 1

    # every box and line of text drawn, nothing of the view's pan and zoom
    elements = list(root.iter())
    items = [e for e in elements if e.tag == f"{SVG}g" and "item" in classes(e)]
    assert len(items) == page.locator("#scene .item").count() == len(layout["items"])
    assert sum(1 for item in items for e in item.iter(f"{SVG}rect")) == page.locator("#scene .item rect").count()
    assert len([e for e in elements if e.tag == f"{SVG}path" and "edge" in classes(e)]) == page.locator("#scene path.edge").count()
    texts = ["".join(e.itertext()) for e in elements if e.tag == f"{SVG}text"]
    assert texts == page.locator("#scene text").all_text_contents()
    for node in ESCAPED_NODES:
        assert node in texts, (node, texts)
    assert any(text.startswith(ESCAPED_WEIGHT + " ") for text in texts), texts  # the weight's row
    assert b"&lt;" in data and b"&amp;" in data and b"relu <1>" not in data  # escaped, not raw
    assert all("scale" not in (e.get("transform") or "") for e in elements), "the view's zoom is in the file"

    # self-contained: the arrow marker, the styles, no script and no handler
    markers = [e for e in elements if e.tag == f"{SVG}marker"]
    assert [m.get("id") for m in markers] == ["arrow"]
    style = root.find(f"{SVG}style")
    assert style is not None and ".item" in (style.text or "") and "var(" not in (style.text or "")
    assert not [e for e in elements if e.tag.endswith("script") or e.tag.endswith("foreignObject")]
    assert not [(e.tag, a) for e in elements for a in e.attrib if a.lower().startswith("on")]

    # opened alone (served on the loopback by a route, not the service), it looks like the page
    viewer = watched.context.new_page()
    url = server.url + "/exported/" + name

    def serve(route: Route) -> None:
        route.fulfill(body=data, content_type="image/svg+xml")

    viewer.route(url, serve)
    viewer.goto(url)
    looks: dict[str, Any] = viewer.evaluate(
        """() => ({
            root: document.documentElement.localName,
            node: getComputedStyle(document.querySelector(".item.node rect")).fill,
            edge: getComputedStyle(document.querySelector("path.edge")).stroke,
            font: getComputedStyle(document.querySelector(".item.node text.head")).fontWeight,
        })"""
    )
    page_looks: dict[str, Any] = page.evaluate(
        """() => ({
            root: "svg",
            node: getComputedStyle(document.querySelector("#scene .item.node rect")).fill,
            edge: getComputedStyle(document.querySelector("#scene path.edge")).stroke,
            font: getComputedStyle(document.querySelector("#scene .item.node text.head")).fontWeight,
        })"""
    )
    assert looks == page_looks
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    viewer.screenshot(path=str(ARTIFACTS / "exported-svg.png"))
    viewer.close()
