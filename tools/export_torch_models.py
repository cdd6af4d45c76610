# Exporter of real PyTorch-made ONNX models for the "real exporters" test.
#
# This module owns the cache folder <repo>/.cache/torch-exports (ignored by git)
# and the small models exported into it. Each model is exported with both of
# torch.onnx's exporters:
#
#   torchscript   torch.onnx.export(..., dynamo=False)  (TorchScript tracing or
#                 a scripted module for control flow)
#   dynamo        torch.onnx.export(..., dynamo=True)   (torch.export; needs the
#                 `onnxscript` package)
#
# Models (weights are seeded and small; the whole folder is about 9 MB):
#
#   cnn           Conv2d, BatchNorm2d, ReLU, MaxPool2d, AdaptiveAvgPool2d,
#                 Linear; dynamic batch dimension (a dim_param in the file)
#   transformer   Embedding, a 2-layer nn.TransformerEncoder, LayerNorm, Linear
#   control_flow  an If and a Loop whose bodies read outer values (captures):
#                 for torchscript a scripted module (Python `if` / `for`), for
#                 dynamo torch.cond and torch's while_loop
#   mlp_external  a ~1M-parameter MLP saved with external data: dynamo through
#                 its own writer (external_data=True), torchscript through
#                 onnx.save_model(save_as_external_data=True)
#
# Two more variants of the exporters' options (what real users also ship):
#
#   transformer-torchscript-functions   export_modules_as_functions for the
#                 encoder layers and LayerNorm: model-local FunctionProtos with
#                 their own domains and attributes
#   cnn-dynamo-unoptimized              optimize=False: the raw dynamo graph
#   cnn-torchscript-legacy              opset_version=7 and
#                 keep_initializers_as_inputs=True: an IR version 3 file whose
#                 weights are graph inputs with initializer defaults, as old
#                 exports are
#   cnn-dynamo-bfloat16                 the CNN and its input in bfloat16
#
# Layout: <out>/<case name>/model.onnx (+ model.onnx.data) and
# <out>/<case name>/export.json:
#   {"stamp": {...versions...}, "status": "ok" | "failed", "error": str | null,
#    "seconds": float, "files": [names]}
# A case whose export.json stamp matches (the SHA-256 of this script, the torch
# and onnx versions, and for dynamo those of onnxscript and onnx-ir) is left
# alone, a recorded failure too (exporter failures are deterministic for one
# set of versions; --force retries); otherwise it is rebuilt in
# <case name>.partial and swapped in. A failed export records the exception
# (type and first message line of it and of its root cause) instead of a model.
#
# Python API: CASES, export_all(out=DEFAULT_OUT, force=False) -> list[CaseResult]
# Usage: export_torch_models.py [--out DIR] [--force]
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import io
import json
import re
import shutil
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from cache_lock import cache_lock

if TYPE_CHECKING:  # torch is imported lazily: the module loads without it
    import torch
    from torch import nn

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / ".cache" / "torch-exports"
MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"
RECORD = "export.json"
MARKER = ".torch-exports-cache"  # present in every folder this script builds

TORCHSCRIPT = "torchscript"
DYNAMO = "dynamo"
EXPORTERS = (TORCHSCRIPT, DYNAMO)
MODELS = ("cnn", "transformer", "control_flow", "mlp_external")

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Case:
    """One model exported with one exporter (and an optional variant of its options)."""

    model: str
    exporter: str
    variant: str = ""

    @property
    def name(self) -> str:
        return f"{self.model}-{self.exporter}" + (f"-{self.variant}" if self.variant else "")

    @property
    def external_data(self) -> bool:
        return self.model == "mlp_external"

    @property
    def control_flow(self) -> bool:
        return self.model == "control_flow"


FUNCTIONS = "functions"  # torchscript: export_modules_as_functions (local FunctionProtos)
UNOPTIMIZED = "unoptimized"  # dynamo: optimize=False (the exporter's raw graph, value_info kept)
LEGACY = "legacy"  # torchscript: opset 7 (IR version 3), initializers also listed as graph inputs
BFLOAT16 = "bfloat16"  # the model and its inputs in bfloat16 (a type numpy lacks)

CASES: tuple[Case, ...] = (
    *(Case(model, exporter) for model in MODELS for exporter in EXPORTERS),
    Case("transformer", TORCHSCRIPT, FUNCTIONS),
    Case("cnn", DYNAMO, UNOPTIMIZED),
    Case("cnn", TORCHSCRIPT, LEGACY),
    Case("cnn", DYNAMO, BFLOAT16),
)


@dataclass(frozen=True)
class CaseResult:
    """What export_all made of one case (read back from its export.json)."""

    case: Case
    folder: Path
    ok: bool
    error: str | None
    seconds: float
    reused: bool  # True when the cached export was kept

    @property
    def model_path(self) -> Path:
        return self.folder / MODEL_FILE


# --------------------------------------------------------------------------
# Versions
# --------------------------------------------------------------------------


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _stamp(case: Case) -> dict[str, Any]:
    import onnx
    import torch

    stamp: dict[str, Any] = {
        "script_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        "torch": str(torch.__version__),
        "onnx": onnx.__version__,
        "exporter": case.exporter,
    }
    if case.exporter == DYNAMO:
        stamp["onnxscript"] = _version("onnxscript")
        stamp["onnx_ir"] = _version("onnx-ir")
    return stamp


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------


def _cnn() -> nn.Module:
    from torch import nn

    model = nn.Sequential(
        nn.Conv2d(3, 8, kernel_size=3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, kernel_size=3),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )
    for module in model:
        if isinstance(module, nn.BatchNorm2d):  # non-trivial running statistics
            assert module.running_mean is not None and module.running_var is not None
            nn.init.uniform_(module.running_mean, -0.5, 0.5)
            nn.init.uniform_(module.running_var, 0.5, 1.5)
            nn.init.uniform_(module.weight, 0.5, 1.5)
            nn.init.uniform_(module.bias, -0.5, 0.5)
    return model


def _transformer() -> nn.Module:
    from torch import nn

    class TinyTransformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(100, 32)
            layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(32)
            self.head = nn.Linear(32, 100)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            logits: torch.Tensor = self.head(self.norm(self.encoder(self.embed(tokens))))
            return logits

    return TinyTransformer()


def _control_flow_scripted() -> nn.Module:
    """If and Loop for the TorchScript exporter: a scripted module."""
    import torch
    from torch import nn

    class ScriptedControlFlow(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.scale = nn.Parameter(torch.full((4,), 0.5))

        def forward(self, x: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
            y: torch.Tensor = self.lin(x) * self.scale if bool(x.sum() > 0) else x - self.scale
            acc = y
            for _ in range(int(steps)):
                acc = acc * self.scale + x
            return acc

    scripted: nn.Module = torch.jit.script(ScriptedControlFlow())
    return scripted


def _control_flow_exportable() -> nn.Module:
    """If and Loop for torch.export: torch.cond and while_loop."""
    from collections.abc import Callable

    import torch
    from torch import nn

    # torch does not annotate while_loop; this is its signature as used here.
    module = importlib.import_module("torch._higher_order_ops.while_loop")
    while_loop = cast("Callable[..., tuple[torch.Tensor, torch.Tensor]]", module.while_loop)

    class CondWhileControlFlow(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.scale = nn.Parameter(torch.full((4,), 0.5))

        def forward(self, x: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
            def then_branch(x: torch.Tensor) -> torch.Tensor:
                out: torch.Tensor = self.lin(x) * self.scale
                return out

            def else_branch(x: torch.Tensor) -> torch.Tensor:
                return x - self.scale

            y: torch.Tensor = torch.cond(x.sum() > 0, then_branch, else_branch, (x,))

            def keep_going(i: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
                return i < steps

            def body(i: torch.Tensor, acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                return i + 1, acc * self.scale + x

            # The carried value must not alias an outer one (y.clone()).
            _, out = while_loop(keep_going, body, (torch.zeros((), dtype=torch.int64), y.clone()))
            return out

    return CondWhileControlFlow()


def _mlp() -> nn.Module:
    from torch import nn

    return nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 8))


def _build(case: Case) -> tuple[nn.Module, tuple[torch.Tensor, ...], dict[str, Any]]:
    """The module, example inputs and export options of a case."""
    import torch

    torch.manual_seed(0)
    options: dict[str, Any] = {}
    model: nn.Module
    if case.model == "cnn":
        model = _cnn()
        args: tuple[torch.Tensor, ...] = (torch.randn(2, 3, 16, 16),)
        options["input_names"] = ["image"]
        options["output_names"] = ["logits"]
        if case.variant == LEGACY:
            options["opset_version"] = 7
            options["keep_initializers_as_inputs"] = True
        if case.exporter == DYNAMO:
            options["dynamic_shapes"] = {"input": {0: torch.export.Dim("batch", min=1, max=64)}}
        else:
            options["dynamic_axes"] = {"image": {0: "batch"}, "logits": {0: "batch"}}
    elif case.model == "transformer":
        model = _transformer()
        args = (torch.randint(0, 100, (1, 8), dtype=torch.int64),)
        options["input_names"] = ["tokens"]
        options["output_names"] = ["logits"]
        if case.variant == FUNCTIONS:
            from torch import nn

            options["export_modules_as_functions"] = {nn.TransformerEncoderLayer, nn.LayerNorm}
    elif case.model == "control_flow":
        model = _control_flow_scripted() if case.exporter == TORCHSCRIPT else _control_flow_exportable()
        args = (torch.randn(2, 4), torch.tensor(3, dtype=torch.int64))
        options["input_names"] = ["x", "steps"]
        options["output_names"] = ["out"]
    elif case.model == "mlp_external":
        model = _mlp()
        args = (torch.randn(1, 512),)
        options["input_names"] = ["features"]
        options["output_names"] = ["scores"]
    else:
        raise ValueError(f"unknown model {case.model!r}")
    if case.variant == UNOPTIMIZED:
        options["optimize"] = False
    if case.variant == BFLOAT16:
        model = model.to(torch.bfloat16)
        args = tuple(arg.to(torch.bfloat16) for arg in args)
    model.eval()
    return model, args, options


# --------------------------------------------------------------------------
# Exporting
# --------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporters' warnings and progress prints (pytest makes warnings errors)."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _export(case: Case, folder: Path) -> None:
    import onnx
    import torch

    if case.exporter == DYNAMO and importlib.util.find_spec("onnxscript") is None:
        raise RuntimeError("the dynamo exporter needs the onnxscript package, which is not installed")
    with _quiet():  # torch.jit.script warns that it is deprecated
        model, args, options = _build(case)
    target = folder / MODEL_FILE
    # No torch.no_grad(): under it an eval-mode nn.TransformerEncoder takes its
    # fused fast path (aten::_transformer_encoder_layer_fwd), which the
    # TorchScript exporter cannot export (UnsupportedOperatorError).
    with _quiet():
        if case.exporter == DYNAMO:
            torch.onnx.export(model, args, str(target), dynamo=True, external_data=case.external_data, verbose=False, **options)
        elif case.external_data:  # weights inline first, then moved out by onnx's own writer
            inline = folder / "inline.onnx"
            torch.onnx.export(model, args, str(inline), dynamo=False, **options)
            proto = onnx.load_model(str(inline))
            inline.unlink()
            onnx.save_model(proto, str(target), save_as_external_data=True, all_tensors_to_one_file=True,
                            location=DATA_FILE, size_threshold=1024)  # fmt: skip
        else:
            torch.onnx.export(model, args, str(target), dynamo=False, **options)
    if not target.is_file():
        raise RuntimeError(f"the exporter wrote no {MODEL_FILE}")


def describe_failure(error: BaseException) -> str:
    """`Type: first line` of an exception and of its root cause, without colour codes."""

    def line(exc: BaseException) -> str:
        text = _ANSI.sub("", str(exc)).strip()
        first = text.splitlines()[0] if text else ""
        return f"{type(exc).__name__}: {first}" if first else type(exc).__name__

    def underlying(exc: BaseException) -> BaseException | None:
        return exc.__cause__ if exc.__cause__ is not None or exc.__suppress_context__ else exc.__context__

    root = error
    seen = {id(root)}
    while (nxt := underlying(root)) is not None and id(nxt) not in seen:
        seen.add(id(nxt))
        root = nxt
    if root is error:
        return line(error)
    # The dynamo exporter wraps the real error; its own summary is generic.
    return f"{line(error)} (root cause: {line(root)})"


def _read_record(folder: Path) -> dict[str, Any] | None:
    try:
        record: dict[str, Any] = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record


def _result(case: Case, folder: Path, record: dict[str, Any], reused: bool) -> CaseResult:
    return CaseResult(case, folder, record["status"] == "ok", record.get("error"), float(record.get("seconds", 0.0)), reused)


def _remove_built(folder: Path) -> None:
    """Remove a case folder this script built (it carries MARKER); refuse others."""
    if not folder.exists():
        return
    if not (folder / MARKER).is_file():
        raise SystemExit(f"{folder} exists but was not made by {Path(__file__).name}; remove it or choose another --out")
    shutil.rmtree(folder)


def export_case(case: Case, out: Path, force: bool = False) -> CaseResult:
    """Export one case into out/<case.name> unless a matching export is there."""
    folder = out / case.name
    stamp = _stamp(case)
    record = _read_record(folder)
    if not force and record is not None and record.get("stamp") == stamp and (record["status"] != "ok" or (folder / MODEL_FILE).is_file()):
        return _result(case, folder, record, reused=True)
    partial = out / f"{case.name}.partial"
    _remove_built(partial)
    partial.mkdir(parents=True)
    (partial / MARKER).write_text("built by tools/export_torch_models.py\n", encoding="utf-8")
    start = time.perf_counter()
    error: str | None = None
    try:
        _export(case, partial)
    except Exception as exc:  # any exporter failure is recorded, not raised
        error = describe_failure(exc)
        for leftover in partial.iterdir():
            if leftover.name != MARKER:
                shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    seconds = round(time.perf_counter() - start, 3)
    files = sorted(p.name for p in partial.iterdir() if p.name != MARKER)
    record = {"stamp": stamp, "status": "failed" if error else "ok", "error": error, "seconds": seconds, "files": files}
    (partial / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    _remove_built(folder)
    partial.rename(folder)
    return _result(case, folder, record, reused=False)


def export_all(out: Path = DEFAULT_OUT, force: bool = False) -> list[CaseResult]:
    """Make every case of CASES in `out`; return the results in CASES order (one process at a time)."""
    with cache_lock(out):
        out.mkdir(parents=True, exist_ok=True)
        return [export_case(case, out, force) for case in CASES]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Export small PyTorch models to ONNX with both torch.onnx exporters.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"cache folder (default {DEFAULT_OUT})")
    parser.add_argument("--force", action="store_true", help="re-export even when the stamp matches")
    args = parser.parse_args(argv)
    for result in export_all(args.out, args.force):
        state = "ok" if result.ok else f"FAILED: {result.error}"
        origin = "cached" if result.reused else f"{result.seconds:.1f}s"
        print(f"{result.case.name:36} {origin:>8}  {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
