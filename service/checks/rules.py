"""Every stable code the check stages report: what it means and what to do about it.

Owns `RULES`, the one table of the codes (code -> `Rule`: the stage, the
severity, what the finding means, what a registry should do, and for the
`security` stage's codes the `security-severity` GitHub code scanning ranks
alerts by), read by the SARIF report (`service.checks.sarif`: each rule's
`fullDescription` and `help`) and written into the docs: the code tables of
docs/checks.md and docs/security-findings.md are generated from it between
their markers (`python -m service.checks.rules --write`; the tests fail when
the docs differ from the table). `MODEL_REFUSED` is the code of a model the
importer refused, which no stage saw (the reports make it a result at the
refused byte).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final


@dataclass(frozen=True, slots=True)
class Rule:
    """One code: `stage` is a check stage, or `import` for the importer's refusal."""

    code: str
    stage: str
    severity: str  # error or warning
    meaning: str  # markdown, one paragraph: SARIF's fullDescription
    action: str  # markdown, one paragraph: what a registry should do (SARIF's help)
    security_severity: str | None = None  # "0.1" to "10.0", security codes only (GitHub's ranking)


MODEL_REFUSED: Final = "model-refused"

_SCHEMA_ACTION: Final = (
    "Fix the exporter or the model so that the node follows its operator's schema at the imported opset, and export again."
)
_SCHEMA_REVIEW: Final = "Review: the check could not decide; the runtime stages say whether onnxruntime accepts the model."
_SHAPE_ACTION: Final = "Fix the declared types and shapes (or the graph) so that onnx's inference agrees with them, and export again."

_TABLE: Final[tuple[Rule, ...]] = (
    Rule(
        MODEL_REFUSED,
        "import",
        "error",
        "The importer refused the file before any stage ran: it breaks a rule of docs/import-rules.md (a truncated or malformed "
        "field, a reference to nothing, external data out of its folder, a limit). Placed at the refused field's byte offset, "
        "with the error's kind and field path.",
        "Refuse the version. The message names the rule broken and the place; fix the exporter or the file and export again.",
    ),
    # signature (service/checks/stages/model_signature.py; the folder's listing: service/checks/signature_worker.py)
    Rule("signature-required", "signature", "error",
         "The model's folder holds no `model.sig`, and `--require-signature` asks every model for one.",
         "Refuse the version, or have its author sign the folder (`model_signing sign`) and send it with its `model.sig`."),
    Rule("signature-unreadable", "signature", "error",
         "`model.sig` cannot be read: larger than 1 MiB, or not a regular file.",
         "Refuse the version; a model-signing bundle is a few KB."),
    Rule("signature-malformed", "signature", "error",
         "`model.sig` is not a Sigstore bundle model-signing reads, or its signed statement is not a model-signing manifest "
         "(its predicate, its serialization or its list of files refused by the library).",
         "Refuse the version; sign the folder again with `model_signing sign`."),
    Rule("signature-untrusted", "signature", "error",
         "No key or certificate chain of `--trusted-signers` verifies `model.sig`: an unknown signer, a changed bundle, or a "
         "keyless Sigstore signature (which needs the network to verify).",
         "Refuse the version, or, once the signer is known, add their public key (or their CA's certificate) to `--trusted-signers`."),
    Rule("signed-file-changed", "signature", "error", "A file of the folder is not the one signed: its digest differs from the "
         "manifest's. Placed at the file's path.", "Refuse the version: the bytes are not those the signer signed."),
    Rule("signed-file-missing", "signature", "error", "A file the signature lists is not in the model's folder (nor sent beside "
         "the model).", "Refuse the version, or send the whole signed folder."),
    Rule("unsigned-file", "signature", "error", "A file of the model's folder that the signature does not list (and does not "
         "ignore, as model-signing ignores git's files and `model.sig`); or the model file itself, left out by the signature's "
         "`ignore_paths`.", "Refuse the version, or sign the folder as it is."),
    Rule("signed-file-unreadable", "signature", "error", "An entry of the model's folder that is not a regular file inside it "
         "(a link, a device), or a folder with more files than `--max-external-files` (plus the model and its signature).",
         "Refuse the version; sign and send a folder of plain files."),
    # schema: the operator check (importer/check.py)
    Rule("unknown-op", "schema", "error", "No operator of this name exists in the node's domain at any opset version.", _SCHEMA_ACTION),
    Rule("op-not-yet-defined", "schema", "error", "The operator exists, but only from an opset version newer than the model imports.",
         "Import the opset that defines the operator, or replace the node; export again."),
    Rule("op-deprecated", "schema", "error", "The operator is deprecated at the opset version the model imports.", _SCHEMA_ACTION),
    Rule("experimental-op", "schema", "warning", "A default-domain operator the checker skips as experimental.", _SCHEMA_REVIEW),
    Rule("domain-not-imported", "schema", "error", "A model-local function's body uses a domain the function does not import.",
         _SCHEMA_ACTION),
    Rule("function-opset-incompatible", "schema", "error",
         "A model-local function imports a domain at a version that selects another schema than the model's import of it.",
         _SCHEMA_ACTION),
    Rule("no-inputs-or-outputs", "schema", "error", "A node with neither inputs nor outputs.", _SCHEMA_ACTION),
    Rule("too-few-inputs", "schema", "error", "A node has fewer inputs than its schema requires.", _SCHEMA_ACTION),
    Rule("too-many-inputs", "schema", "error", "A node has more inputs than its schema (or the called function) allows.", _SCHEMA_ACTION),
    Rule("input-count-not-allowed", "schema", "error", "A node's number of inputs is not one its schema allows.", _SCHEMA_ACTION),
    Rule("required-input-empty", "schema", "error", "A required (single) input of a node is given an empty name.", _SCHEMA_ACTION),
    Rule("too-few-outputs", "schema", "error", "A node has fewer outputs than its schema requires.", _SCHEMA_ACTION),
    Rule("too-many-outputs", "schema", "error", "A node has more outputs than its schema (or the called function) allows.",
         _SCHEMA_ACTION),
    Rule("output-count-not-allowed", "schema", "error", "A node's number of outputs is not one its schema allows.", _SCHEMA_ACTION),
    Rule("required-output-empty", "schema", "error", "A required (single) output of a node is given an empty name.", _SCHEMA_ACTION),
    Rule("unknown-attribute", "schema", "error", "A node has an attribute its schema (or the called function) does not declare.",
         _SCHEMA_ACTION),
    Rule("attribute-type", "schema", "error", "An attribute's type is not the one its schema declares.", _SCHEMA_ACTION),
    Rule("duplicate-attribute", "schema", "error", "A node names the same attribute twice.", _SCHEMA_ACTION),
    Rule("missing-attribute", "schema", "error", "A required attribute of the node's schema is missing.", _SCHEMA_ACTION),
    Rule("constant-value", "schema", "error", "A Constant node does not have exactly one value attribute.", _SCHEMA_ACTION),
    Rule("input-type", "schema", "error", "An input's known type is not among the types its formal parameter allows.", _SCHEMA_ACTION),
    Rule("input-types-differ", "schema", "error", "Inputs bound to one homogeneous type parameter have different types.",
         _SCHEMA_ACTION),
    Rule("opset-newer-than-table", "schema", "warning",
         "The model imports an opset newer than the operator table knows; that domain's findings are warnings (the newer opset may "
         "allow them).", _SCHEMA_REVIEW),
    Rule("domain-not-checked", "schema", "warning",
         "Nodes of a custom domain, which has no schemas: listed as not checked, one finding per domain and scope.", _SCHEMA_REVIEW),
    Rule("check-incomplete", "schema", "warning", "The operator check itself broke on this model (a bug of ours to fix).",
         "Report it with the model; the other stages still ran."),
    # security (service/checks/stages/security.py)
    Rule(
        "static-output-too-large",
        "security",
        "error",
        (
            "A node output whose size the model's constants fix holds more than `--max-static-output` bytes (default 1 "
            "GiB), and the node makes more elements than it reads: the model turns a few bytes into a huge allocation "
            "when run. Also a sparse initializer, or a `Constant`'s `sparse_value`, whose dense form is that large "
            "(runtimes densify them at load). Placed at the node (or the sparse initializer)."
        ),
        (
            "Refuse the version, or raise the bound for this model after a review. Neither the `runtime` load "
            "(onnxruntime folds constants as it loads) nor the `smoke` run is made (both `skipped`, with the reason)."
        ),
        security_severity="8.0",
    ),
    Rule(
        "function-expansion-too-large",
        "security",
        "error",
        (
            "The calls of model-local functions in the main graph (and its subgraphs) would expand, once every function "
            "is inlined as onnx's shape inference and onnxruntime do, to more than `--max-inlined-nodes` nodes (default "
            "1,000,000), or never end (a function that calls itself, directly or through others). Counted without "
            "inlining, each function once (see below). Placed at the outermost call where the running total passes the "
            "bound, with the call's and the whole model's counts."
        ),
        (
            "Refuse the version: a few KB that buy unbounded work. No other stage is given the model (`shape`, `runtime`, "
            "`smoke` skipped, with the reason)."
        ),
        security_severity="8.0",
    ),
    Rule(
        "loop-trip-count",
        "security",
        "error",
        (
            "A `Loop` (in any graph or function body) whose trip count `M` is a constant (an initializer, a `Constant`, or "
            "what the size estimate folds) past `--max-loop-trips` (default 1,000,000), or that has no `M` at all. An error "
            "when nothing ends it sooner: its condition input is absent or a constant true, and its body's condition output "
            "is its condition input (directly or through `Identity`) or a constant true; a 290-byte model then asks for "
            "10^15 iterations. A warning when the body computes its condition (a while-loop: torch exports them with `M` = "
            "INT64_MAX), which may end it sooner. Placed at the node."
        ),
        (
            "Error: refuse the version; the `smoke` run is not made (`skipped`, with the reason). Warning: review; a smoke "
            "run of it is stopped after `--smoke-cpu-seconds` of CPU time (`incomplete`)."
        ),
        security_severity="7.0",
    ),
    Rule(
        "static-input-too-large",
        "security",
        "warning",
        (
            "A declared graph input (without a default) whose static shape, symbolic dimensions taken as 1, is past the "
            "bound: a run must be given that much."
        ),
        (
            "Review: large inputs can be legitimate (video, point clouds). The `smoke` run refuses to make such inputs "
            "(`skipped`)."
        ),
        security_severity="4.0",
    ),
    Rule(
        "external-data-memory-address",
        "security",
        "error",
        (
            "A tensor's external-data `location` holds onnxruntime's marker `*/_ORT_MEM_ADDR_/*`: onnxruntime then takes "
            "the `offset` as an address in its own process memory and reads the tensor from there (a memory disclosure or "
            "a crash). Placed at the `external_data` entry."
        ),
        "Refuse. No exporter writes this into a file: onnxruntime uses it for in-memory models only.",
        security_severity="9.0",
    ),
    Rule(
        "python-callback-op",
        "security",
        "error",
        (
            "An op named like a Python callback (`PyOp`, `PythonOp`, `PyFunc`, `EagerPyFunc`, any name holding \"python\", "
            "compared without case or `_`), or one whose attributes name a Python module and a callable (`module` with "
            "`class_name`, `compute`, `function` or `func`: the shape of onnxruntime's `PyOp`). Any domain. Where a "
            "runtime provides it, the model chooses the Python code it runs. Placed at the node's `op_type`. A call of a "
            "model-local function of that name is not flagged (the runtime inlines the function's body, which is checked "
            "itself)."
        ),
        "Refuse.",
        security_severity="9.0",
    ),
    Rule(
        "bidi-override-character",
        "security",
        "error",
        (
            "A name, doc string, metadata key or value, external-data entry, domain, or function or attribute name holds "
            "a bidirectional embedding, override or isolate (U+202A to U+202E, U+2066 to U+2069): the text shown is not "
            "the text read (Trojan Source, CVE-2021-42574). Placed at the string's field."
        ),
        "Refuse, or strip the characters and re-export.",
        security_severity="7.0",
    ),
    Rule(
        "custom-operator-domain",
        "security",
        "warning",
        (
            "Nodes of a domain other than `\"\"`/`ai.onnx`, `ai.onnx.ml` and `ai.onnx.preview.training`: they run only "
            "where a native custom-op library for that domain is registered (`com.microsoft` is onnxruntime's built-in "
            "contrib set, reported too: other runtimes lack it). One finding per domain, placed at the first node's "
            "`domain`, with the number of nodes and the ops. Calls of model-local functions are not custom ops."
        ),
        "Review: accept domains whose library the registry's users trust and have.",
        security_severity="4.0",
    ),
    Rule(
        "control-character",
        "security",
        "warning",
        (
            "A name (value, node, graph, function, attribute, domain, producer, metadata key, external-data entry) holds "
            "a C0 or C1 control character (U+0000 to U+001F, U+007F to U+009F), or a doc string or metadata value holds "
            "one other than tab, newline and carriage return. Terminal escapes and NULs in names mislead logs and tools."
        ),
        "Review.",
        security_severity="3.0",
    ),
    Rule(
        "declared-dim-too-large",
        "security",
        "warning",
        (
            "A declared dimension (graph input, output or `value_info`, in any graph, through sequence, optional and map "
            "types) is larger than `max_declared_dim`, 2^31 - 1 by default: past it a dimension cannot be indexed by the "
            "32-bit integers many kernels and accelerators use, and one float32 row of it is already 8 GiB."
        ),
        "Review; usually an exporter bug or a crafted model.",
        security_severity="3.0",
    ),
    # shape (service/checks/stages/shape.py)
    Rule("declared-type-conflict", "shape", "error",
         "The inferred element type (or kind of type) of an output differs from the declared one.", _SHAPE_ACTION),
    Rule("declared-shape-conflict", "shape", "error", "The inferred rank or a dimension differs from the declared one.", _SHAPE_ACTION),
    Rule("shape-inference-error", "shape", "error", "Any other inference error at a node.", _SHAPE_ACTION),
    Rule("shape-inference-follow-on", "shape", "warning",
         "An inference error at a node whose producer already failed inference: a consequence of that error.",
         "Fix the producer's error first; this one usually goes with it."),
    Rule("shape-not-inferred", "shape", "warning",
         "Nodes of ops with no schema: onnx infers no types for their outputs, and reports no inference error for the nodes after "
         "them in the graph.", "Review: the nodes after these are not shape-checked."),
    Rule("shape-data-unavailable", "shape", "warning",
         "Inference needs the values of a tensor it cannot be given (too large, or external data it may not read).",
         "Review: the node's shape is not checked."),
    # runtime (service/checks/stages/runtime.py)
    Rule("runtime-op-not-implemented", "runtime", "error", "No kernel or function for an operator.",
         "Refuse the version for this runtime, or register the custom-op library that implements it."),
    Rule("runtime-invalid-graph", "runtime", "error", "onnxruntime's checker or type inference refuses the graph.",
         "Fix the graph and export again."),
    Rule("runtime-invalid-model", "runtime", "error", "onnxruntime cannot parse the model.", "Fix the exporter and export again."),
    Rule("runtime-load-failed", "runtime", "error", "Any other failure of session creation.",
         "Read the message: fix the model, or report a runtime bug."),
    # smoke (service/checks/stages/smoke.py)
    Rule("smoke-run-failed", "smoke", "error", "The run failed (at the node onnxruntime names), at the binding the message "
         "names: the first run, or the second, at `--smoke-second-dim`, of the dimensions left unbound.",
         "Fix the node the message names (one that fails only at the second binding holds a dimension fixed at export, such as "
         "a Reshape target traced at batch 1), or bind the dimensions the run needs (`--dim`, `?dim=`, the model's "
         "`onnx_import.dims`)."),
    Rule("smoke-output-type", "smoke", "error", "An output's kind or element type is not the declared one.",
         "Fix the output's declaration or the graph."),
    Rule("smoke-output-shape", "smoke", "error", "An output's rank or a dimension is not the declared one.",
         "Fix the output's declaration or the graph."),
)  # fmt: skip

RULES: Final[dict[str, Rule]] = {rule.code: rule for rule in _TABLE}

CHECKS_DOC: Final = Path("docs/checks.md")
SECURITY_DOC: Final = Path("docs/security-findings.md")
BEGIN: Final = "<!-- the codes: generated from service/checks/rules.py by `python -m service.checks.rules --write` -->"
END: Final = "<!-- end of the generated codes -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def checks_table() -> str:
    """docs/checks.md's table: every code but the security stage's, which has its own document."""
    lines = ["| stage | code | severity | meaning | what to do |", "| --- | --- | --- | --- | --- |"]
    for rule in _TABLE:
        if rule.stage == "security":
            continue
        lines.append(f"| `{rule.stage}` | `{rule.code}` | {rule.severity} | {_cell(rule.meaning)} | {_cell(rule.action)} |")
        if rule.stage == "schema" and rule.code == "check-incomplete":
            lines.append("| `security` | see [security-findings.md](security-findings.md) | | | |")
    return "\n".join(lines) + "\n"


def security_table() -> str:
    """docs/security-findings.md's table of the security stage's codes."""
    lines = ["| Code | Severity | What it means | What a registry should do |", "|---|---|---|---|"]
    for rule in _TABLE:
        if rule.stage == "security":
            lines.append(f"| `{rule.code}` | {rule.severity} | {_cell(rule.meaning)} | {_cell(rule.action)} |")
    return "\n".join(lines) + "\n"


def with_table(document: str, table: str) -> str:
    """`document` with the text between its markers replaced by `table`."""
    head, begin, rest = document.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the document has no {BEGIN!r} ... {END!r} markers")
    return f"{head}{BEGIN}\n{table}{END}{tail}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.checks.rules", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--write", action="store_true", help="rewrite the tables in docs/ (run from the repository's root)")
    args = parser.parse_args(argv)
    if not args.write:
        sys.stdout.write(checks_table() + "\n" + security_table())
        return 0
    for path, table in ((CHECKS_DOC, checks_table()), (SECURITY_DOC, security_table())):
        path.write_text(with_table(path.read_text(encoding="utf-8"), table), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
