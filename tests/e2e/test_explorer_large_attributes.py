"""A node whose TENSORS attribute holds more tensors than its graph document
lists, in the explorer (explorer/node-details.js, summary.js), in headless
Chromium against a real server (the fixtures and steps of
support/explorer_browser.py: only loopback requests, no uncaught script
error).

A user relies on: the node's details listing the tensors the document gives
and saying how many more the attribute holds, never silently fewer; the
summary saying how many tensors the catalogue left out. Skipped, with the
reason, where Playwright or Chromium cannot be had.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.explorer_browser import Watched, import_path, open_explorer, show_graph, skip_without_a_browser
from support.service_harness import ServiceProcess, copy_samples

from service.tasks.catalog_builder import MAX_CATALOGUED_PER_ATTRIBUTE
from service.tasks.graph_document import MAX_LISTED_TENSORS

skip_without_a_browser()

from playwright.sync_api import expect  # noqa: E402

ITEMS = MAX_CATALOGUED_PER_ATTRIBUTE + 200


def packed_model() -> bytes:
    """A Relu whose attribute `pack` holds ITEMS empty tensors."""
    items = [onnx.TensorProto(name=f"p{index}", data_type=TensorProto.FLOAT, dims=[0]) for index in range(ITEMS)]
    node = helper.make_node("Relu", ["x"], ["y"], name="packer")
    node.attribute.append(helper.make_attribute("pack", items, attr_type=onnx.AttributeProto.TENSORS))
    graph = helper.make_graph(
        [node],
        "packed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(np.zeros(3, np.float32), "W")],
    )
    data: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    return data


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = copy_samples(tmp_path_factory.mktemp("large-attributes") / "root")
    (root / "packed.onnx").write_bytes(packed_model())
    return root


def test_the_details_say_how_many_tensors_the_document_left_out(server: ServiceProcess, watched: Watched) -> None:
    page = open_explorer(watched, server)
    import_path(page, "packed.onnx")
    show_graph(page)
    page.locator("#scene .item.node", has_text="Relu").click()
    details = page.locator("#details")
    expect(details.locator("table.attributes")).to_contain_text("TENSORS")
    expect(details.locator(".tensor-link")).to_have_count(MAX_LISTED_TENSORS)
    expect(details.locator(".omitted")).to_have_text(f"and {ITEMS - MAX_LISTED_TENSORS:,} more tensors: see the tensors list")
    page.click("#tabs [data-tab=summary]")
    left_out = ITEMS - MAX_CATALOGUED_PER_ATTRIBUTE
    expected = f"{MAX_CATALOGUED_PER_ATTRIBUTE + 1:,} tensors (and {left_out:,} more in large tensor attributes, not catalogued)"
    expect(page.locator("#tab-summary")).to_contain_text(expected)
