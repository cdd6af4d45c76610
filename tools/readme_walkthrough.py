"""The README, executed: its walkthrough blocks run as a new user runs them.

In a checkout's root (a fresh clone), `bash tools/dev.sh serve` starts with
its defaults (setting up .venv when needed; the store in ./state/store, the
bundled samples as the data root, port 8000). Every block that the README
marks with a `<!-- walkthrough: ... -->` line is read from that checkout's
README, split into its commands (a command goes on over `\\` line ends), and
run in order in one bash from the root. Each command's comment says what it
must answer: `# 200: ...` is the HTTP status of every curl request it makes
(a curl shim on the PATH records them), `# exit N` its exit status (0 when
the comment names none). Then the tensors it saved are compared with what the
onnx package reads from the same model.

    .venv/bin/python tools/readme_walkthrough.py [ROOT]   # exit 0: every example answered as the README says

Used by tests/e2e/test_readme.py (on a fresh copy of the checkout) and by
.ci/run (in the clone inside a bare container). Needs curl, and port 8000 free.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MARKER = "<!-- walkthrough:"
PORT = 8000  # the README's examples name it
SETUP_TIMEOUT_S = 900.0  # a fresh .venv: the dependencies, and the compiled importer where a compiler works
STEP = "@@readme"  # what the runner writes to stderr around each command
CLEAN_ENVIRONMENT = ("ONNX_SERVICE_", "IMPORTER_", "PYTHON")  # a new user's shell has none of these


class WalkthroughError(Exception):
    """The walkthrough could not run, or an example did not answer as the README says."""


@dataclass(frozen=True)
class Example:
    command: str  # as the README has it, continuation lines included
    status: int | None  # every curl request's HTTP status (None: any)
    exit_status: int


@dataclass(frozen=True)
class Outcome:
    statuses: list[int]
    exit_status: int


def readme_examples(text: str) -> list[Example]:
    """The commands of every marked block, in the README's order."""
    examples: list[Example] = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if not line.startswith(MARKER):
            continue
        if not lines[index + 1].startswith("```sh"):
            raise WalkthroughError(f"README line {index + 2}: a walkthrough marker must be followed by a sh block")
        end = lines.index("```", index + 2)
        command: list[str] = []
        for body in lines[index + 2 : end]:
            command.append(body)
            if not body.rstrip().endswith("\\"):
                examples.append(_example("\n".join(command)))
                command = []
        if command:
            raise WalkthroughError(f"README line {end}: the block ends inside a command")
    return examples


def _example(command: str) -> Example:
    last = command.splitlines()[-1]
    comment = last.rsplit("#", 1)[1] if "#" in last else ""
    status = re.match(r"\s*(\d{3}):", comment)
    exit_status = re.match(r"\s*exit (\d+)", comment)
    return Example(command, int(status.group(1)) if status else None, int(exit_status.group(1)) if exit_status else 0)


def clean_environment(importer_build: str | None = None) -> dict[str, str]:
    """A new user's environment; `importer_build` sets IMPORTER_BUILD, the one default a caller may change."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith(CLEAN_ENVIRONMENT)}
    return environment | ({"IMPORTER_BUILD": importer_build} if importer_build else {})


def port_taken(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def _answers(url: str) -> bool:
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=2.0) as answer:
            return bool(answer.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@contextlib.contextmanager
def serving(root: Path, log: Path, importer_build: str | None = None) -> Iterator[None]:
    """`bash tools/dev.sh serve`, with its defaults (but `importer_build`), from `root`, until the block ends."""
    if port_taken(PORT):
        raise WalkthroughError(f"port {PORT}, which the README's examples use, is taken on 127.0.0.1")
    with log.open("wb") as output:
        process = subprocess.Popen(
            ["bash", "tools/dev.sh", "serve"],
            cwd=root,
            env=clean_environment(importer_build),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + SETUP_TIMEOUT_S
        while not _answers(f"http://127.0.0.1:{PORT}/healthz"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise WalkthroughError(f"`bash tools/dev.sh serve` did not answer on port {PORT}:\n{_tail(log, 4000)}")
            time.sleep(0.5)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):  # gone already: a setup that failed
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def _tail(path: Path, size: int) -> str:
    return path.read_text(errors="replace")[-size:]


def run_examples(root: Path, examples: list[Example], scratch: Path) -> list[Outcome]:
    """Each example's curl statuses and exit status, run in order in one bash from `root`."""
    real = shutil.which("curl")
    if real is None:
        raise WalkthroughError("the README's examples use curl, which is not installed")
    shim = scratch / "bin"
    shim.mkdir(parents=True, exist_ok=True)
    (shim / "curl").write_text(f"#!/bin/sh\nexec {real} --write-out '%{{stderr}}{STEP} status %{{http_code}}\\n' \"$@\"\n")
    (shim / "curl").chmod(0o755)
    script = "".join(f"echo '{STEP} start' >&2\n{example.command}\necho \"{STEP} exit $?\" >&2\n" for example in examples)
    environment = clean_environment()
    environment["PATH"] = f"{shim}:{environment.get('PATH', '/usr/bin:/bin')}"
    ran = subprocess.run(
        ["bash", "-c", script], cwd=root, env=environment, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
    )
    outcomes: list[Outcome] = []
    for line in ran.stderr.splitlines():
        words = line.split()
        if line.startswith(f"{STEP} start"):
            outcomes.append(Outcome([], -1))
        elif line.startswith(f"{STEP} status"):
            outcomes[-1].statuses.append(int(words[-1]))
        elif line.startswith(f"{STEP} exit"):
            outcomes[-1] = Outcome(outcomes[-1].statuses, int(words[-1]))
    if len(outcomes) != len(examples):
        raise WalkthroughError(f"the walkthrough stopped after {len(outcomes)} of {len(examples)} commands:\n{ran.stderr[-3000:]}")
    return outcomes


def mismatches(examples: list[Example], outcomes: list[Outcome]) -> list[str]:
    """Each example that did not answer as its comment says, with what it got."""
    wrong = []
    for example, outcome in zip(examples, outcomes, strict=True):
        status_wrong = example.status is not None and (not outcome.statuses or set(outcome.statuses) != {example.status})
        if status_wrong or outcome.exit_status != example.exit_status:
            expected = f"status {example.status or 'any'}, exit {example.exit_status}"
            wrong.append(f"{example.command}\n    expected {expected}; got statuses {outcome.statuses}, exit {outcome.exit_status}")
    return wrong


def saved_tensor_problems(root: Path) -> list[str]:
    """The tensor W of add.onnx, as the walkthrough saved it, against onnx's reading of the model."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    reference = onnx.load(str(root / "testdata" / "samples" / "add.onnx"))
    weight = numpy_helper.to_array(next(tensor for tensor in reference.graph.initializer if tensor.name == "W"))
    problems = []
    if (root / "W.bin").read_bytes() != weight.tobytes():
        problems.append("W.bin differs from onnx's W")
    if (root / "W.head").read_bytes() != weight.tobytes()[:8]:
        problems.append("W.head is not the first 8 bytes of onnx's W")
    for saved in ("W.npy", "W-client.npy"):
        loaded = np.load(root / saved, allow_pickle=False)
        if loaded.dtype != weight.dtype or not np.array_equal(loaded, weight):
            problems.append(f"{saved} differs from onnx's W")
    if not (root / "state" / "store").is_dir():
        problems.append("the store is not in ./state/store, the default")
    return problems


def walk(root: Path, scratch: Path, importer_build: str | None = None) -> tuple[list[Example], list[str]]:
    """Serve from `root` with the defaults (IMPORTER_BUILD=`importer_build` when given), run the
    README's walkthrough, and say what went wrong."""
    examples = readme_examples((root / "README.md").read_text(encoding="utf-8"))
    log = scratch / "serve.log"
    with serving(root, log, importer_build):
        outcomes = run_examples(root, examples, scratch)
    wrong = mismatches(examples, outcomes)
    if wrong:
        wrong.append("-- the service's log:\n" + _tail(log, 3000))
        return examples, wrong
    return examples, saved_tensor_problems(root)


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else ".").resolve()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="readme-walkthrough-") as scratch:
        try:
            examples, problems = walk(root, Path(scratch))
        except WalkthroughError as error:
            print(f"readme_walkthrough: {error}", file=sys.stderr)
            return 1
    for problem in problems:
        print(f"readme_walkthrough: {problem}", file=sys.stderr)
    verdict = "failed" if problems else "passed"
    print(f"readme_walkthrough: {len(examples)} README examples {verdict} in {time.monotonic() - started:.0f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
