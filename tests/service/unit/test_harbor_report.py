"""The Harbor scanner's report from a scan's summaries (`service.registry.harbor_report`), without a registry:
the severities (an error finding High, a stage that did not end High, a refused model Critical, none Unknown),
findings of one code at one node merged into one entry (Harbor keeps one record per id, package and version),
errors past the summary's listed findings counted, and an artifact refused whole. The same reports over a
real registry, checked against the spec: tests/service/api/test_harbor_scanner.py."""

from __future__ import annotations

from typing import Any

from service.registry.harbor_report import ScannedFile, vulnerability_report

ARTIFACT = {"repository": "models/net", "digest": "sha256:" + "ab" * 32}
SHA = "cd" * 32


def finding(code: str, node: str | None, offset: int, severity: str = "error", stage: str = "schema") -> dict[str, Any]:
    return {"stage": stage, "severity": severity, "code": code, "message": f"{code} here", "node_name": node,
            "op_type": "Add" if node else None, "domain": "", "field_path": "ModelProto.graph.node[0]", "offset": offset}  # fmt: skip


def summary(items: list[dict[str, Any]], errors: int | None = None, checks: dict[str, Any] | None = None) -> dict[str, Any]:
    listed = sum(item["severity"] == "error" for item in items)
    return {"model_file": {"sha256": SHA}, "checks": checks or {"schema": {"status": "fail"}},
            "diagnostics": {"errors": listed if errors is None else errors, "items": items}}  # fmt: skip


def test_findings_of_one_code_at_one_node_are_one_entry_and_warnings_none() -> None:
    items = [finding("bad-attribute", "add", 10), finding("bad-attribute", "add", 30), finding("too-few-inputs", "add", 10),
             finding("bad-attribute", "mul", 50), finding("unused-value", None, 0, severity="warning")]  # fmt: skip
    report = vulnerability_report(ARTIFACT, [ScannedFile("model.onnx", summary(items), "m1")])
    keys = [(entry["id"], entry["package"]) for entry in report["vulnerabilities"]]
    assert keys == [("bad-attribute", "model.onnx#add"), ("too-few-inputs", "model.onnx#add"), ("bad-attribute", "model.onnx#mul")]
    first = report["vulnerabilities"][0]
    assert "at byte offset 10" in first["description"] and "at byte offset 30" in first["description"]
    assert first["vendor_attributes"]["findings"] == 2 and first["version"] == f"sha256:{SHA}"
    assert {entry["severity"] for entry in report["vulnerabilities"]} == {"High"} and report["severity"] == "High"


def test_unlisted_errors_and_stages_that_did_not_end_are_high_entries() -> None:
    checks = {"schema": {"status": "fail"}, "shape": {"status": "incomplete", "reason": "the worker ran out of time"},
              "runtime": {"status": "skipped", "reason": "the security stage failed"}}  # fmt: skip
    report = vulnerability_report(ARTIFACT, [ScannedFile("a/model.onnx", summary([finding("x", "n", 5)], errors=250, checks=checks), "m1")])
    entries = {entry["id"] + " " + entry["package"]: entry for entry in report["vulnerabilities"]}
    assert set(entries) == {"x a/model.onnx#n", "more-findings a/model.onnx", "stage-incomplete a/model.onnx#shape",
                            "stage-incomplete a/model.onnx#runtime"}  # fmt: skip
    assert "249 more error findings" in entries["more-findings a/model.onnx"]["description"]
    assert "ran out of time" in entries["stage-incomplete a/model.onnx#shape"]["description"]
    assert report["severity"] == "High"


def test_a_refused_model_is_critical_and_a_clean_one_adds_nothing() -> None:
    refused = ScannedFile("b.onnx", verdict="refused", code="Malformed", reason="Malformed: cut short", field_path="ModelProto.graph",
                          offset=12, sha256=SHA)  # fmt: skip
    clean = ScannedFile("a.onnx", summary([], checks={"schema": {"status": "pass"}}), "m1")
    report = vulnerability_report(ARTIFACT, [clean, refused])
    [entry] = report["vulnerabilities"]
    assert (entry["id"], entry["package"], entry["severity"], entry["version"]) == ("Malformed", "b.onnx", "Critical", f"sha256:{SHA}")
    assert entry["description"].endswith("[field ModelProto.graph at byte offset 12]") and report["severity"] == "Critical"
    assert vulnerability_report(ARTIFACT, [clean])["severity"] == "Unknown"
    incomplete = ScannedFile("c.onnx", verdict="incomplete", reason="the worker died")
    assert vulnerability_report(ARTIFACT, [incomplete])["vulnerabilities"][0]["severity"] == "High"


def test_an_artifact_refused_whole_is_one_critical_entry() -> None:
    report = vulnerability_report(ARTIFACT, [], refusal="layer 0's file path '../m.onnx' leaves the artifact")
    [entry] = report["vulnerabilities"]
    assert (entry["id"], entry["package"], entry["severity"]) == ("refused", f"models/net@{ARTIFACT['digest']}", "Critical")
    assert "leaves the artifact" in entry["description"] and report["artifact"] == ARTIFACT
