"""What the explorer's list and summary say of a model, in headless Chromium
against a real server (the fixtures and steps of support/explorer_browser.py:
only loopback requests, no uncaught script error).

A user relies on: the list's verdict saying which stages it covers
(`pass · 3 of 6 stages`, the stages named in its title), so the same bytes'
`pass` with three stages is not taken for one with five; an upload carrying
the name and label typed above the drop zone, listed and shown under them
(and offered by them in the Diff tab);
the summary's table of the smoke run's bindings, a column per run and a row
per dimension with its source (and, from a summary with the request's
`dims` only, those). Skipped, with the reason, where Playwright or Chromium
cannot be had.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from onnx import TensorProto, helper
from support.explorer_browser import Watched, open_explorer, skip_without_a_browser
from support.service_harness import ServiceProcess, copy_samples

skip_without_a_browser()

from playwright.sync_api import Page, Route, expect  # noqa: E402

EVERY_STAGE = "schema,security,shape,runtime,smoke"


def batched_model(note: str) -> bytes:
    """y = Relu(x), x of shape [batch, 4]: a symbolic dimension for the smoke run to bind."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "batched",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], doc_string=note)
    model.ir_version = 10
    data: bytes = model.SerializeToString()
    return data


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_samples(tmp_path_factory.mktemp("model-names") / "root")


def imported(server: ServiceProcess, data: bytes, query: str = "") -> dict[str, object]:
    with httpx.Client(base_url=server.url, timeout=300) as client:
        answer = client.post(f"/models{query}", files={"model": ("batched.onnx", data)})
    assert answer.status_code == 201, answer.text
    summary: dict[str, object] = answer.json()
    return summary


def test_the_list_says_which_stages_a_verdict_covers(server: ServiceProcess, watched: Watched) -> None:
    three = imported(server, batched_model("three stages"))
    five = imported(server, batched_model("five stages"), f"?checks={EVERY_STAGE}")
    page = open_explorer(watched, server)
    for summary, ran, title in (
        (three, 3, "ran: schema (pass), security (pass), shape (pass); not run: signature, runtime, smoke"),
        (five, 5, "ran: schema (pass), security (pass), shape (pass), runtime (pass), smoke (pass); not run: signature"),
    ):
        badge = page.locator(f"#models li[data-id='{summary['id']}'] .stage-status")
        expect(badge).to_have_text(f"✓ pass · {ran} of 6 stages")
        expect(badge).to_have_attribute("title", title)


def test_an_upload_carries_the_name_and_label_typed(server: ServiceProcess, watched: Watched, tmp_path: Path) -> None:
    other = imported(server, batched_model("compared with the named one"))
    model = tmp_path / "model.onnx"
    model.write_bytes(batched_model("named by the page"))
    page = open_explorer(watched, server)
    page.fill("#upload-name", "ranker")
    page.fill("#upload-label", "v3 fp16")
    page.set_input_files("#files", str(model))
    expect(page.locator("#tab-summary h2")).to_have_text("ranker")
    expect(page.locator("#model-label")).to_have_text("v3 fp16")
    entry = page.locator("#models li", has_text="ranker")
    expect(entry).to_have_count(1)
    expect(entry.locator(".model-label")).to_have_text("v3 fp16")
    expect(entry).not_to_contain_text("model.onnx")
    named_id = entry.get_attribute("data-id") or ""
    page.click(f"#models li[data-id='{other['id']}'] a")  # the Diff tab offers it by name and label
    expect(page.locator("#tab-summary h2")).to_have_text(str(other["input"]))  # opened: its summary no longer takes the tab
    page.click("#tabs [data-tab=diff]")
    expect(page.locator(f"#diff-with option[value='{named_id}']")).to_have_text(f"ranker (v3 fp16) {named_id[:8]}")


def opened_with_summary(watched: Watched, server: ServiceProcess, summary: dict[str, object]) -> Page:
    """The explorer with the model of `summary` opened, its summary answered as `summary` says."""
    model_id = str(summary["id"])

    def answered(route: Route) -> None:
        route.fulfill(status=200, content_type="application/json", body=json.dumps(summary))

    page = open_explorer(watched, server)
    page.route(f"{server.url}/models/{model_id}", answered)
    page.click(f"#models li[data-id='{model_id}'] a")
    return page


def test_the_summary_shows_the_smoke_runs_bindings(server: ServiceProcess, watched: Watched) -> None:
    """Each run's bindings and their sources, as the summary gives them
    (`checks.smoke.bindings` and `binding_sources`, laid over a real summary here)."""
    summary = imported(server, batched_model("two bindings"), f"?checks={EVERY_STAGE}")
    checks = summary["checks"]
    assert isinstance(checks, dict)
    checks["smoke"] |= {
        "bindings": [{"batch": 1, "x[1]": 4}, {"batch": 2, "x[1]": 4}],
        "binding_sources": {"batch": "default", "x[1]": "model"},
    }
    table = opened_with_summary(watched, server, summary).locator("#smoke-bindings")
    expect(table.locator("thead th")).to_have_text(["dimension", "1st binding", "2nd binding", "source"])
    expect(table.locator("tr[data-dimension=batch] td")).to_have_text(["1", "2", "default"])
    expect(table.locator("tr[data-dimension='x[1]'] td")).to_have_text(["4", "4", "model"])


def test_a_summary_with_the_requests_dims_only_shows_them(server: ServiceProcess, watched: Watched) -> None:
    """A summary from before the bindings (`checks.smoke.dims` alone: the
    request's, of the one run): the real summary of a run with `?dim=`, any
    `bindings` taken out."""
    summary = imported(server, batched_model("one binding"), f"?checks={EVERY_STAGE}&dim=batch:3")
    checks = summary["checks"]
    assert isinstance(checks, dict)
    smoke = checks["smoke"]
    assert smoke["dims"] == {"batch": 3}, smoke
    smoke.pop("bindings", None)
    smoke.pop("binding_sources", None)
    page = opened_with_summary(watched, server, summary)
    table = page.locator("#smoke-bindings")
    expect(table.locator("thead th")).to_have_text(["dimension", "1st binding", "source"])
    expect(table.locator("tr[data-dimension=batch] td")).to_have_text(["3", "request"])
    expect(page.locator("#tab-summary")).to_contain_text("The request's bindings of the one run; every other free dimension was 1.")
