"""Validation at the speed of its parts: a new version's wait for its verdict, three ways, side by side in one run (issues 40, 57).

Per model, in rounds (the order of the ways rotated every round, so a change
in the machine's load touches all alike), after one untimed warm-up round
(every file in the page cache, the service's stage modules read once):

1. **by hand**, what a user runs in a fresh process: a `python -c` process
   that imports onnx, onnxruntime and numpy, then runs
   `onnx.checker.check_model(path, full_check=True)`, creates
   `onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])`
   (onnxruntime's default options) and runs it once on inputs of ones
   (symbolic and unknown dimensions 1; 1.0 for floats, 1 for integers, True
   for booleans). Timed: the whole process (the parent's wall time around
   `subprocess.run`: start-up, imports, work, exit by `os._exit` once its
   answer is written) and, measured inside it, each step. For a large model
   (below) by hand is **onnxruntime alone**: the same process without onnx
   and its check (session from the path, one run on ones), and for the one
   in 150 files, then the SHA-256 of the model file and each data file
   (read a MiB at a time: a verdict is bound to those bytes). Its peak
   resident memory is its own VmHWM after the run, before the hashes.
   For the three networks onnxruntime alone is a fourth way (`alone`),
   measured the same, for the memory table.
2. **`onnx-import check`**: the repository's command, `.venv/bin/onnx-import
   check PATH --checks schema,security,shape,runtime,smoke` (cold workers:
   its own fork server, an import worker, then a check worker). Timed: the
   whole process; its JSON report gives each stage's seconds.
3. **warm service**: one `python -m service` (tests/support/service_harness.py's
   `serving`: a temporary store, the data root `.cache`), started once;
   per round `POST /models?checks=schema,security,shape,runtime,smoke` with
   `{"path": ...}` (200 or 201). Timed: the request's wall time. The
   summary's `checks.STAGE.seconds` give each stage's seconds, and the
   service's log each worker's wall time (`import of ...: ok in N s`, the
   import worker: the importer, hashing, `schema`, `security`, the tensors
   converted into the work folder; `checks of ...`, the check worker:
   `shape`, `runtime`, `smoke`), which run side by side, after the
   `externals` worker that lists a path import's external files (to size
   the check worker's memory); what is left beside those is the front end's (the request, the commit
   into the store, the answer). Each log line also gives that worker's
   steps (`WorkerHeader.steps`): fork (from the front end's asking to the
   worker's start), open, walls, read (the importer), then the import
   worker's stages, catalogue and hashes, or the check worker's narrow,
   refusals and each stage: the second table. Each worker's peak resident
   memory (`WorkerPeaks`: VmHWM of the workers the service's fork server
   starts, polled every 10 ms; each matched to the import or check worker
   the log names by how long it lived) and the memory its cap counts
   (VmData + RssShmem): the third table, against onnxruntime alone's. A path import always
   runs its workers, but commits nothing when its content is stored, and an
   upload the tenant holds is answered from the store: so every timed round
   is followed by `DELETE /models/{id}` (untimed), which removes the stored
   content once no tenant holds it (checked: the store's `models/{id}` folder
   is gone before the next round).

Models, made once into the ignored cache `.cache/validation-models/` (kept
if present; written under a temporary name, then renamed), defined in plain
torch (`torch.nn`, random weights, seed 0) and exported with
`torch.onnx.export(..., dynamo=False)` (the TorchScript exporter, as
tools/export_torch_models.py does), opset 17:

- resnet50: ResNet-50 (bottleneck blocks 3-4-6-3, 1000 classes), input
  `image` [batch, 3, 224, 224] float;
- bert_base: BERT-base (vocabulary 30,522, 768 wide, 512 positions, 2 token
  types, 12 layers of 12 heads, FFN 3,072, post-LayerNorm, a pooler), inputs
  `input_ids` and `attention_mask` [batch, sequence] int64; one file;
- gpt2_small: GPT-2 small (vocabulary 50,257, 768 wide, 1,024 positions, 12
  decoder layers with causal self-attention, pre-LayerNorm, the LM head tied
  to the token embedding), input `input_ids` [batch, sequence] int64; every
  tensor over 1 kB in one external file `gpt2_small.onnx.data` beside it
  (exported inline, then `onnx.save_model(save_as_external_data=True,
  all_tensors_to_one_file=True)`).

A model whose export fails is replaced by a synthetic one of the same size
and node count (MatMul weights and Relu nodes, onnx.helper), and said so.

Two large models (issue 57; `--skip-large` leaves them out), made once into
`.cache/validation-models/NAME/` by the benches' own makers, measured by
hand (onnxruntime alone, above) and through the warm service (`onnx-import
check` is not run on them):

- external_3gib: bench/large_models.py's `write_external_model`, 12 MatMul
  weights of [8192, 8192] float (256 MiB each, no two alike) in two external
  files of 1.5 GiB, `x` [batch, 8192];
- gpt2_shape_150: bench/mapping_bench.py's `make_model` (a file per
  weight): GPT-2 small's 148 weights plus two, 475 MiB in 150 external files,
  `input_ids` [1, 8]; by hand counts the SHA-256 of its 151 files.

Every model file and data file is made readable to all (see READABLE).

The 200,000-node model (`.cache/bench/nodes.onnx`, bench/make_models.py's
`make_node_model(small=False)` if missing) is measured the same three ways
but with the issue's reference for it: a fresh process running
`onnx.load`, `onnx.checker.check_model` and
`onnx.shape_inference.infer_shapes(strict_mode=True)`; `onnx-import check`
and the service with their default stages (no `--checks`, no `?checks=`);
and a fourth way, its bytes uploaded as multipart (`POST /models`, the
part `model`) with the default stages.

Each figure is the median of `--runs` rounds. The machine may be shared: the
load average is printed at the start and the end, and per model the cores
other processes used meanwhile (the cores' busy time less this run's).

Usage: python bench/validation_bench.py [--runs 3] [--only NAME,...] [--skip-nodes] [--skip-large] [--wait-load 1.5]
       [--json FILE] [--models-only]
       python bench/validation_bench.py --from-json FILE   (the tables of a saved run)
(--models-only: make the models and stop. --wait-load: first wait, up to 10
minutes, for the 1-minute load average to fall below it.)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import importlib.metadata
import io
import itertools
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

REPO = Path(__file__).resolve().parent.parent
# The checkout first: tests/importer (a folder of tests) must not hide the importer; tools/ for what tests/support imports.
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tools")]

CACHE = REPO / ".cache"
MODELS = CACHE / "validation-models"
NODES_MODEL = CACHE / "bench" / "nodes.onnx"
ALL_STAGES = "schema,security,shape,runtime,smoke"
OPSET = 17
TIMEOUT = 900.0  # seconds one measurement may take
NETWORKS = ("resnet50", "bert_base", "gpt2_small")
LARGE = ("external_3gib", "gpt2_shape_150")
HASHED_BY_HAND = ("gpt2_shape_150",)  # the by-hand time counts the SHA-256 of its files (issue 57)
MIB = 1 << 20
# onnx's writer makes an external data file 0600 (`save_model(save_as_external_data=True)`, gpt2_small's); a service
# run as root starts its workers as uid 65534, whose onnxruntime could not open such a file by name in its minimal
# root, so its weights would be handed over instead of mapped. The bench's own files are made readable to all.
READABLE = 0o444

Way = Literal["hand", "alone", "cli", "service", "upload"]
WAYS_OF: dict[str, tuple[Way, ...]] = {
    "network": ("hand", "alone", "cli", "service"),
    "large": ("hand", "service"),  # by hand is onnxruntime alone there
    "nodes": ("hand", "cli", "service", "upload"),
}


def serving(store: Path, data_root: Path, *args: str) -> contextlib.AbstractContextManager[Any]:
    """tests/support/service_harness.py's started `python -m service` (imported at run time: mypy checks this script alone)."""
    harness = importlib.import_module("support.service_harness")
    started: contextlib.AbstractContextManager[Any] = harness.serving(store, data_root, *args)
    return started


# The reference processes. Their first statement starts the clock: the
# interpreter's own start-up is in the parent's wall time only.
HAND_REFERENCE = """
import time
started = time.perf_counter()
import hashlib, json, os, sys
import numpy as np
checked = sys.argv[2] == "check"
if checked:
    import onnx
import onnxruntime as ort
imported = time.perf_counter()
steps = {"imports": imported - started}

def answer(status):
    sys.stdout.write(json.dumps({"steps": steps, "status": status}))
    sys.stdout.flush()
    os._exit(0)

TYPES = {"float": np.float32, "double": np.float64, "float16": np.float16, "int8": np.int8, "int16": np.int16,
         "int32": np.int32, "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32,
         "uint64": np.uint64, "bool": np.bool_}
path = sys.argv[1]
if checked:
    mark = time.perf_counter()
    try:
        onnx.checker.check_model(path, full_check=True)
    except Exception as error:
        answer("check failed: " + type(error).__name__ + ": " + str(error)[:200])
    steps["check"] = time.perf_counter() - mark
mark = time.perf_counter()
try:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
except Exception as error:
    answer("session failed: " + type(error).__name__ + ": " + str(error)[:200])
steps["session"] = time.perf_counter() - mark
mark = time.perf_counter()
feeds = {}
for value in session.get_inputs():
    element = value.type[len("tensor("):-1]
    if not value.type.startswith("tensor(") or element not in TYPES:
        answer("not run: input " + value.name + " is " + value.type)
    shape = [size if isinstance(size, int) and size >= 0 else 1 for size in value.shape]
    feeds[value.name] = np.ones(shape, TYPES[element])
try:
    session.run(None, feeds)
except Exception as error:
    answer("run failed: " + type(error).__name__ + ": " + str(error)[:200])
steps["run"] = time.perf_counter() - mark
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
steps["peak"] = int(status["VmHWM"].split()[0]) * 1024  # before the hashes; not ru_maxrss, which keeps the bench's across exec
if sys.argv[3:]:
    mark = time.perf_counter()
    for name in sys.argv[3:]:
        with open(name, "rb") as file:
            hashlib.file_digest(file, "sha256").hexdigest()
    steps["hashes"] = time.perf_counter() - mark
answer("pass")
"""

NODES_REFERENCE = """
import time
started = time.perf_counter()
import json, os, sys
import onnx
imported = time.perf_counter()
steps = {"imports": imported - started}
status = "pass"
try:
    mark = time.perf_counter()
    model = onnx.load(sys.argv[1])
    steps["load"] = time.perf_counter() - mark
    mark = time.perf_counter()
    onnx.checker.check_model(model)
    steps["check"] = time.perf_counter() - mark
    mark = time.perf_counter()
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    steps["infer"] = time.perf_counter() - mark
except Exception as error:
    status = "raised " + type(error).__name__ + ": " + str(error)[:200]
sys.stdout.write(json.dumps({"steps": steps, "status": status}))
sys.stdout.flush()
os._exit(0)
"""


@dataclass
class Model:
    name: str
    kind: Literal["network", "nodes", "large"]
    path: Path
    origin: str = ""  # how it was made
    nodes: int = 0
    mebibytes: float = 0.0  # the model file and its external data
    external: bool = False
    files: list[str] = field(default_factory=list)  # the model file and its external data files
    hashed_by_hand: bool = False  # by hand includes the SHA-256 of `files`


@dataclass
class Sample:
    """One measurement: the wall time, the parts timed inside it (steps, stage seconds, workers) and the verdict."""

    wall: float
    parts: dict[str, float] = field(default_factory=dict)
    status: str = ""


@dataclass
class Figures:
    model: Model
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    other_cores: float = 0.0
    notes: list[str] = field(default_factory=list)


# --- the models


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporter's warnings and prints (as tools/export_torch_models.py does)."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _resnet50() -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    import torch
    from torch import nn

    class Bottleneck(nn.Module):  # type: ignore[misc]
        def __init__(self, inplanes: int, planes: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU()
            self.downsample: Any = None
            if stride != 1 or inplanes != planes * 4:
                self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False), nn.BatchNorm2d(planes * 4))

        def forward(self, x: Any) -> Any:
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            return self.relu(self.bn3(self.conv3(out)) + identity)

    class ResNet50(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1)
            )
            blocks: list[Any] = []
            inplanes = 64
            for planes, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                for index in range(count):
                    blocks.append(Bottleneck(inplanes, planes, stride if index == 0 else 1))
                    inplanes = planes * 4
            self.blocks = nn.Sequential(*blocks)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(2048, 1000)

        def forward(self, image: Any) -> Any:
            return self.fc(torch.flatten(self.pool(self.blocks(self.stem(image))), 1))

    options = {"input_names": ["image"], "output_names": ["logits"], "dynamic_axes": {"image": {0: "batch"}, "logits": {0: "batch"}}}
    return ResNet50(), (torch.randn(1, 3, 224, 224),), options


def _heads(x: Any, batch: Any, length: Any) -> Any:
    """[batch, length, 768] -> [batch, 12, length, 64]."""
    return x.reshape(batch, length, 12, 64).transpose(1, 2)


def _attention(q: Any, k: Any, v: Any, bias: Any) -> Any:
    """Scaled dot-product attention of [batch, 12, length, 64] with an additive bias; [batch, length, 768]."""
    import torch

    batch, length = q.shape[0], q.shape[2]
    weights = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / 8.0 + bias, dim=-1)
    return torch.matmul(weights, v).transpose(1, 2).reshape(batch, length, 768)


def _bert_base() -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    import torch
    from torch import nn

    class Layer(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.query, self.key, self.value, self.output = (nn.Linear(768, 768) for _ in range(4))
            self.norm1, self.norm2 = nn.LayerNorm(768, eps=1e-12), nn.LayerNorm(768, eps=1e-12)
            self.up, self.down, self.gelu = nn.Linear(768, 3072), nn.Linear(3072, 768), nn.GELU()

        def forward(self, x: Any, bias: Any) -> Any:
            batch, length = x.shape[0], x.shape[1]
            q, k, v = (_heads(projection(x), batch, length) for projection in (self.query, self.key, self.value))
            x = self.norm1(x + self.output(_attention(q, k, v, bias)))
            return self.norm2(x + self.down(self.gelu(self.up(x))))

    class Bert(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.words, self.positions, self.types = nn.Embedding(30522, 768), nn.Embedding(512, 768), nn.Embedding(2, 768)
            self.norm = nn.LayerNorm(768, eps=1e-12)
            self.layers = nn.ModuleList(Layer() for _ in range(12))
            self.pooler = nn.Linear(768, 768)
            self.register_buffer("position_ids", torch.arange(512).unsqueeze(0), persistent=False)

        def forward(self, input_ids: Any, attention_mask: Any) -> tuple[Any, Any]:
            length = input_ids.shape[1]
            x = self.words(input_ids) + self.positions(self.position_ids[:, :length]) + self.types(torch.zeros_like(input_ids))
            x = self.norm(x)
            bias = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
            for layer in self.layers:
                x = layer(x, bias)
            return x, torch.tanh(self.pooler(x[:, 0]))

    axes = {0: "batch", 1: "sequence"}
    options = {
        "input_names": ["input_ids", "attention_mask"],
        "output_names": ["last_hidden_state", "pooler_output"],
        "dynamic_axes": {"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes, "pooler_output": {0: "batch"}},
    }
    ids = torch.randint(0, 30522, (1, 8), dtype=torch.int64)
    return Bert(), (ids, torch.ones(1, 8, dtype=torch.int64)), options


def _gpt2_small() -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    import torch
    from torch import nn

    class Block(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(768), nn.LayerNorm(768)
            self.qkv, self.project = nn.Linear(768, 2304), nn.Linear(768, 768)
            self.up, self.down, self.gelu = nn.Linear(768, 3072), nn.Linear(3072, 768), nn.GELU(approximate="tanh")

        def forward(self, x: Any, bias: Any) -> Any:
            batch, length = x.shape[0], x.shape[1]
            q, k, v = (_heads(part, batch, length) for part in self.qkv(self.norm1(x)).split(768, dim=2))
            x = x + self.project(_attention(q, k, v, bias))
            return x + self.down(self.gelu(self.up(self.norm2(x))))

    class GPT2(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.tokens, self.positions = nn.Embedding(50257, 768), nn.Embedding(1024, 768)
            self.blocks = nn.ModuleList(Block() for _ in range(12))
            self.norm = nn.LayerNorm(768)

        def forward(self, input_ids: Any) -> Any:
            length = input_ids.shape[1]
            x = self.tokens(input_ids) + self.positions(torch.arange(length, dtype=torch.int64).unsqueeze(0))
            bias = torch.triu(torch.full((length, length), -10000.0), diagonal=1)
            for block in self.blocks:
                x = block(x, bias)
            return torch.matmul(self.norm(x), self.tokens.weight.t())  # the LM head, tied

    axes = {0: "batch", 1: "sequence"}
    options = {
        "input_names": ["input_ids"],
        "output_names": ["logits"],
        "dynamic_axes": {"input_ids": axes, "logits": axes},
        # Folding would store the tied embedding a second time, transposed for the head (154 MB).
        "do_constant_folding": False,
    }
    return GPT2(), (torch.randint(0, 50257, (1, 8), dtype=torch.int64),), options


BUILDERS: dict[str, Callable[[], tuple[Any, tuple[Any, ...], dict[str, Any]]]] = {
    "resnet50": _resnet50,
    "bert_base": _bert_base,
    "gpt2_small": _gpt2_small,
}
# The fallback's shape when an export fails: (MiB, nodes) near the export's.
FALLBACK_SIZE = {"resnet50": (97.5, 122), "bert_base": (418.0, 400), "gpt2_small": (474.5, 650)}


def _export(name: str, partial: Path) -> None:
    import onnx
    import torch

    torch.manual_seed(0)
    with _quiet():
        model, args, options = BUILDERS[name]()
    model.eval()
    target = partial / f"{name}.onnx"
    with _quiet(), torch.no_grad():
        if name == "gpt2_small":  # inline first, then every tensor moved out by onnx's own writer
            inline = partial / "inline.onnx"
            torch.onnx.export(model, args, str(inline), dynamo=False, opset_version=OPSET, **options)
            proto = onnx.load_model(str(inline))
            inline.unlink()
            onnx.save_model(proto, str(target), save_as_external_data=True, all_tensors_to_one_file=True,
                            location=f"{name}.onnx.data", size_threshold=1024)  # fmt: skip
        else:
            torch.onnx.export(model, args, str(target), dynamo=False, opset_version=OPSET, **options)


def _synthetic(name: str, partial: Path) -> None:
    """A stand-in of the export's size and node count: square MatMul weights, then Relu nodes."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    mebibytes, count = FALLBACK_SIZE[name]
    side = 1024
    layers = max(1, round(mebibytes * MIB / (side * side * 4)))
    rng = np.random.default_rng(0)
    initializers, nodes, previous = [], [], "x"
    for layer in range(layers):
        weight = numpy_helper.from_array(rng.standard_normal((side, side), dtype=np.float32), f"w{layer}")
        initializers.append(weight)
        nodes.append(helper.make_node("MatMul", [previous, weight.name], [f"m{layer}"], name=f"matmul_{layer}"))
        previous = f"m{layer}"
    for index in range(max(0, count - layers)):
        nodes.append(helper.make_node("Relu", [previous], [f"r{index}"], name=f"relu_{index}"))
        previous = f"r{index}"
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", side])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, ["batch", side])],
        initializers,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    external = name == "gpt2_small"
    onnx.save_model(proto, str(partial / f"{name}.onnx"), save_as_external_data=external, all_tensors_to_one_file=True,
                    location=f"{name}.onnx.data")  # fmt: skip


def make_network(name: str) -> Model:
    """The exported model in MODELS (made unless there): its files built in a partial folder, then renamed, the model file last."""
    target = MODELS / f"{name}.onnx"
    origin_file = MODELS / f"{name}.origin"
    if not target.is_file():
        partial = MODELS / f"{name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        started = time.perf_counter()
        try:
            _export(name, partial)
            origin = f"torch.onnx.export, TorchScript exporter, opset {OPSET}"
        except Exception as error:  # the exporter's failure is said, and a synthetic model stands in
            for leftover in partial.iterdir():
                leftover.unlink()
            _synthetic(name, partial)
            origin = f"synthetic (onnx.helper): the export failed: {type(error).__name__}: {str(error).splitlines()[0][:200]}"
        print(f"{name}: made in {time.perf_counter() - started:.1f} s ({origin})", flush=True)
        origin_file.write_text(origin + "\n")
        for part in sorted(partial.iterdir(), key=lambda path: path.suffix == ".onnx"):
            part.rename(MODELS / part.name)
        partial.rmdir()
    origin = origin_file.read_text().strip() if origin_file.is_file() else "found in the cache"
    return Model(name, "network", target, origin)


def bench_module(name: str) -> Any:
    """A module of bench/ (imported at run time: mypy checks this script alone)."""
    if str(REPO / "bench") not in sys.path:
        sys.path.insert(0, str(REPO / "bench"))
    return importlib.import_module(name)


def make_large(name: str) -> Model:
    """A large model in MODELS/NAME/ (made unless there) by the bench's own makers, in a partial folder, then renamed:
    external_3gib is bench/large_models.py's `write_external_model`, gpt2_shape_150 bench/mapping_bench.py's
    `make_model` (a file per weight)."""
    folder = MODELS / name
    origin = {
        "external_3gib": "bench/large_models.py: write_external_model (12 weights of 256 MiB in two files)",
        "gpt2_shape_150": "bench/mapping_bench.py: make_model(one_file=False) (150 external files, GPT-2 small's weights)",
    }[name]
    if not (folder / "model.onnx").is_file():
        partial = MODELS / f"{name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
        started = time.perf_counter()
        if name == "external_3gib":
            bench_module("large_models").write_external_model(partial)
        else:
            bench_module("mapping_bench").make_model(partial, one_file=False)
        partial.rename(folder)
        print(f"{name}: made in {time.perf_counter() - started:.1f} s ({origin})", flush=True)
    return Model(name, "large", folder / "model.onnx", origin, hashed_by_hand=name in HASHED_BY_HAND)


def nodes_model() -> Model:
    if not NODES_MODEL.exists():
        NODES_MODEL.parent.mkdir(parents=True, exist_ok=True)
        bench_module("make_models").make_node_model(small=False)
    return Model("200,000 nodes", "nodes", NODES_MODEL, "bench/make_models.py: make_node_model(small=False)")


def describe(model: Model) -> None:
    """Its node count (main graph), whether it has external data, and its size on disk with that data."""
    import onnx

    proto = onnx.load(str(model.path), load_external_data=False)
    model.nodes = len(proto.graph.node)
    locations = {
        entry.value
        for tensor in proto.graph.initializer
        if tensor.data_location == onnx.TensorProto.EXTERNAL
        for entry in tensor.external_data
        if entry.key == "location"
    }
    model.external = bool(locations)
    model.files = [str(model.path), *(str(model.path.parent / location) for location in sorted(locations))]
    model.mebibytes = sum(Path(name).stat().st_size for name in model.files) / MIB
    for name in model.files:  # readable by the workers' identity: see READABLE
        Path(name).chmod(Path(name).stat().st_mode | READABLE)


# --- the machine's load (as bench/checks_bench.py measures it)


def cpu_busy() -> int:
    """Busy jiffies of all cores (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(values[:8]) - values[3] - values[4]


def run_ticks() -> int:
    """CPU ticks of this run so far: this process, its reaped children and every live descendant (the service, its workers)."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
        ticks[int(entry.name)] = sum(int(v) for v in fields[11:15])
    me = os.getpid()

    def descends(pid: int) -> bool:
        for _ in range(64):
            pid = parents.get(pid, 0)
            if pid == me:
                return True
            if pid <= 1:
                return False
        return False

    own = os.times()
    total = round((own.user + own.system + own.children_user + own.children_system) * os.sysconf("SC_CLK_TCK"))
    return total + sum(value for pid, value in ticks.items() if descends(pid))


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def wait_for_load(below: float, longest: float) -> float:
    """Wait until the 1-minute load average is below `below` (at most `longest` seconds); the seconds waited."""
    started = time.monotonic()
    while float(load_average().split()[0]) >= below and time.monotonic() - started < longest:
        time.sleep(5.0)
    return time.monotonic() - started


# --- measuring


def by_hand(model: Model, way: Way) -> Sample:
    """By hand (`hand`), or onnxruntime alone (`alone`; by hand is that for a large model), in a fresh process."""
    if model.kind == "nodes":
        arguments = [NODES_REFERENCE, str(model.path)]
    else:
        checked = way == "hand" and model.kind == "network"
        hashed = model.files if way == "hand" and model.hashed_by_hand else []
        arguments = [HAND_REFERENCE, str(model.path), "check" if checked else "-", *hashed]
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", *arguments], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT)
    wall = time.perf_counter() - started
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        return Sample(wall, status=f"died ({done.returncode}): {done.stderr.strip()[-200:]}")
    return Sample(wall, {name: float(value) for name, value in answer["steps"].items()}, str(answer["status"]))


def stage_seconds(checks: dict[str, Any]) -> dict[str, float]:
    return {stage: float(entry.get("seconds", math.nan)) for stage, entry in checks.items()}


def stage_statuses(checks: dict[str, Any]) -> str:
    return "/".join(f"{stage} {entry['status']}" for stage, entry in checks.items() if entry["status"] != "pass") or "pass"


def command(model: Model) -> Sample:
    tool = Path(sys.executable).parent / "onnx-import"
    stages = [] if model.kind == "nodes" else ["--checks", ALL_STAGES]
    started = time.perf_counter()
    done = subprocess.run([str(tool), "check", str(model.path), *stages], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT)
    wall = time.perf_counter() - started
    try:
        report = json.loads(done.stdout)
    except ValueError:
        return Sample(wall, status=f"exit {done.returncode}: {done.stderr.strip()[-200:]}")
    checks = report.get("checks", {})
    status = stage_statuses(checks) if checks else f"{report.get('verdict')} (exit {done.returncode})"
    return Sample(wall, stage_seconds(checks), status)


WORKER_LINE = re.compile(
    r"\b(import|checks|externals) of '(?P<name>[^']*)': (?P<status>\w+) in (?P<seconds>[0-9.]+) s(?: \((?P<steps>[^)]*)\))?"
)
STEP = re.compile(r"([a-z_]+) ([0-9.]+)")


def _read(path: str) -> str:
    try:
        with open(path) as file:
            return file.read()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    """The process's children (each thread's: a child is listed under the thread that forked it)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    return [int(child) for thread in threads for child in _read(f"/proc/{pid}/task/{thread}/children").split()]


def _status_bytes(text: str, name: str) -> int:
    start = text.find(name + ":")
    return int(text[start + len(name) + 1 : text.index("kB", start)]) * 1024 if start >= 0 else 0


def _memory(pid: int) -> tuple[int, int]:
    """The process's peak resident memory (VmHWM) and the memory its cap holds it to now (VmData + RssShmem:
    service.sandbox.worker.memory_limit.counted_bytes), bytes; 0 once it is gone."""
    text = _read(f"/proc/{pid}/status")
    return _status_bytes(text, "VmHWM"), _status_bytes(text, "VmData") + _status_bytes(text, "RssShmem")


class WorkerPeaks:
    """Each worker's peak resident memory (VmHWM) while a request runs.

    A worker is a child of the service's fork server(s) (found once: the
    processes below the service running `multiprocessing.forkserver`), with
    its own child, the first process of its PID namespace, which does the job;
    a worker's peak is the larger of the two VmHWMs, polled every 10 ms
    (VmHWM never falls; reading it is a few small /proc reads, not a scan),
    and its `counted` peak the largest VmData + RssShmem seen (what its memory
    cap holds it to, the mapped files left out). Which worker is which: `stop`.
    """

    def __init__(self, service_pid: int) -> None:
        below: set[int] = set()
        frontier = {service_pid}
        while frontier:
            frontier = {child for pid in frontier for child in _children(pid)} - below
            below |= frontier
        self.fork_servers = [pid for pid in below if "multiprocessing.forkserver" in _read(f"/proc/{pid}/cmdline")]
        self.known = {child for server in self.fork_servers for child in _children(server)}
        self.peaks: dict[int, int] = {}
        self.counted: dict[int, int] = {}
        self.first_seen: dict[int, float] = {}
        self.last_seen: dict[int, float] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while True:
            now = time.monotonic()
            for worker in {child for server in self.fork_servers for child in _children(server)} - self.known:
                seen = [_memory(worker)] + [_memory(child) for child in _children(worker)]
                peak = max(resident for resident, _ in seen)
                if peak:
                    self.peaks[worker] = max(self.peaks.get(worker, 0), peak)
                    self.counted[worker] = max([self.counted.get(worker, 0)] + [counted for _, counted in seen])
                    self.first_seen.setdefault(worker, now)
                    self.last_seen[worker] = now
            if self.stopped.wait(0.01):
                return

    def stop(self, logged: dict[str, float]) -> dict[str, float]:
        """`peak: import`, `peak: checks`, `counted: import` and `counted: checks`, bytes: each of the two workers
        the service logged (`logged`: `import worker` and `check worker` seconds) is the one seen for about as long
        (the pair of workers whose lifetimes are closest to the two logged; the `externals` workers and the
        readiness probe live some 20 to 100 ms)."""
        self.stopped.set()
        self.thread.join()
        roles = [(role, logged[key]) for role, key in (("import", "import worker"), ("checks", "check worker")) if key in logged]
        lifetime = {pid: self.last_seen[pid] - self.first_seen[pid] for pid in self.peaks}
        best: tuple[float, tuple[int, ...]] | None = None
        for chosen in itertools.permutations(lifetime, len(roles)):
            error = sum(abs(lifetime[pid] - seconds) for pid, (_, seconds) in zip(chosen, roles, strict=True))
            if best is None or error < best[0]:
                best = (error, chosen)
        found: dict[str, float] = {}
        for pid, (role, _) in zip(best[1] if best else (), roles, strict=False):
            found[f"peak: {role}"] = float(self.peaks[pid])
            found[f"counted: {role}"] = float(self.counted[pid])
        return found


class Service:
    """The started service, its client and its log (read from where the last round left it)."""

    def __init__(self, started: Any) -> None:
        self.started = started
        self.client = httpx.Client(base_url=started.url, timeout=TIMEOUT)
        self.log: Path = started.log
        self.log_offset = self.log.stat().st_size
        self.pid: int = started.process.pid

    def worker_seconds(self, display_name: str) -> dict[str, float]:
        """The import worker's and the check worker's wall time, as the service
        logged them since the last call, and each worker's steps (its profile:
        `import: read`, `checks: shape`, ...)."""
        with self.log.open("rb") as log:
            log.seek(self.log_offset)
            text = log.read().decode(errors="replace")
            self.log_offset = log.tell()
        found: dict[str, float] = {}
        for match in WORKER_LINE.finditer(text):
            if match.group("name") == display_name[:100]:
                key = {"import": "import worker", "checks": "check worker", "externals": "externals workers"}[match.group(1)]
                found[key] = found.get(key, 0.0) + float(match.group("seconds"))
                if key == "externals workers":
                    found["externals lists"] = found.get("externals lists", 0.0) + 1
                for step, taken in STEP.findall(match.group("steps") or ""):
                    found[f"{match.group(1)}: {step}"] = float(taken)
        return found

    def remove(self, model_id: str) -> None:
        """DELETE the model, and check that its stored content went with it (the next round redoes every step)."""
        if not self.started.content_stored(model_id):
            raise RuntimeError(f"the content of {model_id} is not where the store keeps it: the check after DELETE would prove nothing")
        answer = self.client.delete(f"/models/{model_id}")
        if answer.status_code != 204:
            raise RuntimeError(f"DELETE /models/{model_id}: {answer.status_code} {answer.text[:300]}")
        if self.started.content_stored(model_id):
            raise RuntimeError(f"the content of {model_id} is still stored after its DELETE: a re-import would do less work")

    def post(self, model: Model, upload: bool) -> Sample:
        relative = str(model.path.relative_to(CACHE))
        params = {} if model.kind == "nodes" else {"checks": ALL_STAGES}
        body = model.path.read_bytes() if upload else b""
        peaks = WorkerPeaks(self.pid)
        started = time.perf_counter()
        if upload:
            answer = self.client.post("/models", params=params, files=[("model", (model.path.name, body))])
        else:
            answer = self.client.post("/models", params=params, json={"path": relative})
        wall = time.perf_counter() - started
        logged = self.worker_seconds(model.path.name if upload else relative)
        worker_peaks = peaks.stop(logged)
        if answer.status_code not in (200, 201):
            return Sample(wall, status=f"HTTP {answer.status_code}: {answer.text[:200]}")
        summary = answer.json()
        parts = stage_seconds(summary.get("checks", {})) | logged | worker_peaks
        weights = summary.get("checks", {}).get("runtime", {}).get("weights")
        if weights:
            parts[f"weights: {weights}"] = 1.0
        status = stage_statuses(summary.get("checks", {}))
        if answer.status_code != 201:
            status += f" (HTTP {answer.status_code}: held already)"
        self.remove(str(summary["id"]))
        return Sample(wall, parts, status)


def measure_once(way: Way, model: Model, service: Service) -> Sample:
    if way in ("hand", "alone"):
        return by_hand(model, way)
    if way == "cli":
        return command(model)
    return service.post(model, upload=way == "upload")


def measure(figures: Figures, service: Service, runs: int) -> None:
    model = figures.model
    ways = WAYS_OF[model.kind]
    figures.samples = {way: [] for way in ways}
    busy, mine, started = cpu_busy(), run_ticks(), time.monotonic()
    for way in ways:  # the warm-up: the files in the page cache, the stage modules read once
        warm = measure_once(way, model, service)
        if warm.status != "pass":
            figures.notes.append(f"warm-up, {way}: {warm.status}")
    for round_ in range(runs):
        order = ways[round_ % len(ways) :] + ways[: round_ % len(ways)]
        for way in order:
            figures.samples[way].append(measure_once(way, model, service))
    others = (cpu_busy() - busy) - (run_ticks() - mine)
    figures.other_cores = max(0.0, others / os.sysconf("SC_CLK_TCK") / max(1e-3, time.monotonic() - started))


# --- reporting


def median_wall(samples: list[Sample]) -> float:
    return statistics.median(sample.wall for sample in samples) if samples else math.nan


def median_part(samples: list[Sample], part: str) -> float:
    values = [sample.parts[part] for sample in samples if part in sample.parts]
    return statistics.median(values) if values else math.nan


def seconds(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f} s"


def statuses(samples: list[Sample]) -> str:
    return ", ".join(sorted({sample.status for sample in samples}))


HAND_STEPS = {
    "nodes": ("imports", "load", "check", "infer"),
    "network": ("imports", "check", "session", "run"),
    "large": ("imports", "session", "run", "hashes"),
}
# Targets (issue 40's last figures for resnet50 and bert_base; issue 57): the warm service's time / by hand's, at most.
TIME_TARGETS = {"resnet50": 0.68, "bert_base": 0.50, "gpt2_small": 1.0, "external_3gib": 1.0, "gpt2_shape_150": 0.8}
PEAK_TARGET = 1.25  # each worker's peak resident memory / onnxruntime alone's, at most (issue 57)


def hand_cell(samples: list[Sample], kind: str) -> str:
    steps = [step for step in HAND_STEPS[kind] if not math.isnan(median_part(samples, step))]
    inside = ", ".join(f"{step} {median_part(samples, step):.2f}" for step in steps)
    return f"{seconds(median_wall(samples))} ({inside})"


def service_cell(samples: list[Sample], hand: float) -> str:
    return f"{seconds(median_wall(samples))} ({median_wall(samples) / hand:.2f}x)"


def stages_cell(samples: list[Sample]) -> str:
    names = [name for name in ("schema", "security", "shape", "runtime", "smoke") if not math.isnan(median_part(samples, name))]
    cells = [f"{name} {median_part(samples, name):.2f}" for name in names]
    for worker in ("import worker", "check worker"):
        if not math.isnan(median_part(samples, worker)):
            cells.append(f"{worker} {median_part(samples, worker):.2f}")
    # the externals worker (a path import's: its files listed to size the check worker) runs before the two, which run
    # side by side (service.checks.requested.with_check_worker): the longer one is on the path
    listed = 0.0 if math.isnan(median_part(samples, "externals workers")) else median_part(samples, "externals workers")
    if listed:
        cells.append(f"externals {median_part(samples, 'externals lists'):.0f} in {listed:.3f}")
    times = [median_part(samples, worker) for worker in ("import worker", "check worker")]
    workers = math.nan if any(math.isnan(time) for time in times) else max(times)
    if not math.isnan(workers):
        cells.append(f"front end {median_wall(samples) - workers - listed:.2f}")
    return ", ".join(cells)


def table(all_figures: list[Figures]) -> list[str]:
    lines = [
        "| model | size | by hand, fresh process (steps inside it) | `onnx-import check` (ratio to by hand) "
        "| warm service (ratio to by hand) | the service's parts, seconds |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for figures in all_figures:
        model, samples = figures.model, figures.samples
        hand = median_wall(samples["hand"])
        size = f"{model.mebibytes:,.1f} MiB, {model.nodes:,} nodes" + (", external data" if model.external else "")
        cli = service_cell(samples["cli"], hand) if "cli" in samples else "not run"
        lines.append(
            f"| {model.name} | {size} | {hand_cell(samples['hand'], model.kind)} | {cli} "
            f"| {service_cell(samples['service'], hand)} | {stages_cell(samples['service'])} |"
        )
        if "upload" in samples:
            lines.append(
                f"| {model.name}, multipart upload | | | | {service_cell(samples['upload'], hand)} | {stages_cell(samples['upload'])} |"
            )
    return lines


def alone_samples(figures: Figures) -> list[Sample]:
    """onnxruntime alone in a fresh process: its own way, or by hand where that is onnxruntime alone (a large model)."""
    return figures.samples.get("alone") or (figures.samples["hand"] if figures.model.kind == "large" else [])


def mebibytes(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value / MIB:,.0f} MiB"


def ratio(value: float, reference: float) -> str:
    return "n/a" if math.isnan(value) or math.isnan(reference) or not reference else f"{value / reference:.2f}x"


def memory_table(all_figures: list[Figures]) -> list[str]:
    """Each worker's peak resident memory in the warm service against onnxruntime alone's (medians)."""
    lines = [
        "| model | onnxruntime alone, fresh process: time, peak | import worker's peak (ratio) | check worker's peak (ratio) "
        "| onnxruntime given the weights | check worker's memory as its cap counts it (per model byte) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for figures in all_figures:
        alone, service = alone_samples(figures), figures.samples.get("service", [])
        if not alone or not service:
            continue
        reference = median_part(alone, "peak")
        imported, checked = median_part(service, "peak: import"), median_part(service, "peak: checks")
        weights = ", ".join(
            sorted({part.removeprefix("weights: ") for sample in service for part in sample.parts if part.startswith("weights: ")})
        )
        alone_cell = f"{seconds(median_wall(alone))}, {mebibytes(reference)}"
        import_cell = f"{mebibytes(imported)} ({ratio(imported, reference)})"
        check_cell = f"{mebibytes(checked)} ({ratio(checked, reference)})"
        counted = median_part(service, "counted: checks")
        counted_cell = f"{mebibytes(counted)} ({counted / MIB / figures.model.mebibytes:.2f})"
        given = weights or "none external"
        lines.append(f"| {figures.model.name} | {alone_cell} | {import_cell} | {check_cell} | {given} | {counted_cell} |")
    return lines


def targets(all_figures: list[Figures]) -> list[str]:
    """Each target of issue 57 (and issue 40's figures kept): met or missed."""
    lines = []
    for figures in all_figures:
        name, samples = figures.model.name, figures.samples
        if name in TIME_TARGETS and "service" in samples:
            taken = median_wall(samples["service"]) / median_wall(samples["hand"])
            verdict = "met" if taken <= TIME_TARGETS[name] else "MISSED"
            lines.append(f"- {name}: warm service {taken:.2f}x by hand (target {TIME_TARGETS[name]:.2f}x): {verdict}")
        alone = alone_samples(figures)
        if figures.model.kind == "large" and alone and "service" in samples:
            reference = median_part(alone, "peak")
            for worker in ("import", "checks"):
                taken = median_part(samples["service"], f"peak: {worker}") / reference
                verdict = "met" if taken <= PEAK_TARGET else "MISSED"
                lines.append(f"- {name}: {worker} worker's peak {taken:.2f}x onnxruntime alone's (target {PEAK_TARGET:.2f}x): {verdict}")
    return lines


IMPORT_STEPS = ("fork", "open", "walls", "read", "stages", "catalogue", "hashes")
CHECK_STEPS = ("fork", "open", "walls", "read", "narrow", "refusals", "shape", "runtime", "smoke")


def steps_cell(samples: list[Sample], worker: str, steps: tuple[str, ...]) -> str:
    found = [(step, median_part(samples, f"{worker}: {step}")) for step in steps]
    return ", ".join(f"{step} {taken:.3f}" for step, taken in found if not math.isnan(taken)) or "n/a"


def profile_table(all_figures: list[Figures]) -> list[str]:
    """Each worker's steps in the warm service (medians, seconds): where its wall time went."""
    lines = [
        "| model | import worker: its steps | check worker: its steps |",
        "| --- | --- | --- |",
    ]
    for figures in all_figures:
        for way in ("service", "upload"):
            if way in figures.samples:
                samples = figures.samples[way]
                name = figures.model.name + (", multipart upload" if way == "upload" else "")
                lines.append(f"| {name} | {steps_cell(samples, 'import', IMPORT_STEPS)} | {steps_cell(samples, 'checks', CHECK_STEPS)} |")
    return lines


def verdicts(all_figures: list[Figures]) -> list[str]:
    lines = []
    for figures in all_figures:
        for way, samples in figures.samples.items():
            lines.append(f"- {figures.model.name}, {way}: {statuses(samples)}")
        lines += [f"- {figures.model.name}: {note}" for note in figures.notes]
    return lines


def commit() -> str:
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
    return done.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")


def machine() -> str:
    import onnx
    import onnxruntime

    lines = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "absent"
    return (
        f"{cpu}, {os.cpu_count()} cores, Linux {platform.release()}, Python {platform.python_version()}, onnx {onnx.__version__}, "
        f"onnxruntime {onnxruntime.__version__}, torch {torch_version}"
    )


def report(all_figures: list[Figures]) -> None:
    for figures in all_figures:
        print(f"{figures.model.name}: {figures.model.origin}; other processes {figures.other_cores:.2f} cores")
    print()
    print("\n".join(table(all_figures)))
    print()
    print("\n".join(profile_table(all_figures)))
    print()
    print("\n".join(memory_table(all_figures)))
    print()
    print("\n".join(targets(all_figures)))
    print()
    print("\n".join(verdicts(all_figures)))


def save(all_figures: list[Figures], path: Path, header: dict[str, str]) -> None:
    records = [
        {"model": asdict(figures.model) | {"path": str(figures.model.path)}, "other_cores": figures.other_cores, "notes": figures.notes,
         "samples": {way: [asdict(sample) for sample in samples] for way, samples in figures.samples.items()}}
        for figures in all_figures
    ]  # fmt: skip
    path.write_text(json.dumps({"header": header, "models": records}, indent=1))


def load(path: Path) -> tuple[dict[str, str], list[Figures]]:
    """What `save` wrote (to print the tables again)."""
    saved = json.loads(path.read_text())
    all_figures = []
    for record in saved["models"]:
        model = Model(**(record["model"] | {"path": Path(record["model"]["path"])}))
        samples = {way: [Sample(**sample) for sample in items] for way, items in record["samples"].items()}
        all_figures.append(Figures(model, samples, float(record["other_cores"]), list(record["notes"])))
    return dict(saved["header"]), all_figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="measured rounds per model (median), after one warm-up round")
    parser.add_argument("--only", default="", help="comma-separated parts of model names to measure")
    parser.add_argument("--skip-nodes", action="store_true", help="leave out the 200,000-node model")
    parser.add_argument("--skip-large", action="store_true", help="leave out the two large models (3 GiB, 150 external files)")
    parser.add_argument("--models-only", action="store_true", help="make the models and stop")
    parser.add_argument("--json", type=Path, help="write every sample here")
    parser.add_argument("--from-json", type=Path, help="measure nothing: print the tables of a run saved with --json")
    parser.add_argument(
        "--wait-load", type=float, default=0.0, help="first wait (up to 10 minutes) for the 1-minute load average to fall below this"
    )
    args = parser.parse_args()
    if args.from_json is not None:
        header, saved = load(args.from_json)
        print("\n".join(header.values()))
        report(saved)
        return
    wanted = [part for part in args.only.split(",") if part]
    MODELS.mkdir(parents=True, exist_ok=True)
    models = [make_network(name) for name in NETWORKS if not wanted or any(part in name for part in wanted)]
    if not args.skip_large:
        models += [make_large(name) for name in LARGE if not wanted or any(part in name for part in wanted)]
    if not args.skip_nodes and (not wanted or any(part in "200,000 nodes" for part in wanted)):
        models.append(nodes_model())
    for model in models:
        describe(model)
        size = f"{model.mebibytes:,.1f} MiB, {model.nodes:,} nodes, external data: {model.external}"
        print(f"{model.name}: {size}; {model.origin}", flush=True)
    if args.models_only or not models:
        return
    header = {"when": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}", "machine": machine()}
    print("\n".join(header.values()))
    if args.wait_load:
        waited = wait_for_load(args.wait_load, 600.0)
        header["waited"] = f"waited {waited:.0f} s for the 1-minute load average to fall below {args.wait_load:g}"
        print(header["waited"])
    header["load at the start"] = f"load average at the start: {load_average()}"
    print(header["load at the start"], flush=True)
    all_figures = [Figures(model) for model in models]
    with tempfile.TemporaryDirectory(prefix="validation-bench-") as scratch:
        started = time.perf_counter()
        with serving(Path(scratch) / "store", CACHE) as process:
            print(f"service started in {time.perf_counter() - started:.2f} s at {process.url}", flush=True)
            service = Service(process)
            for figures in all_figures:
                measure(figures, service, args.runs)
                hand = median_wall(figures.samples["hand"])
                ratios = ", ".join(f"{way} {median_wall(samples) / hand:.2f}x" for way, samples in figures.samples.items() if way != "hand")
                print(f"{figures.model.name}: by hand {hand:.2f} s; {ratios} (other processes {figures.other_cores:.2f} cores)", flush=True)
            service.client.close()
    header["load at the end"] = f"load average at the end: {load_average()}"
    print(header["load at the end"])
    if args.json is not None:
        save(all_figures, args.json, header)
    print()
    report(all_figures)


if __name__ == "__main__":
    main()
