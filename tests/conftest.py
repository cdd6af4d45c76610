"""Shared fixtures: the repository paths, the reference tools, the backend data.

The tests are in folders by layer: importer/ (the reader, in process), service/unit/
(the service's parts in process), service/api/ (the API's behaviour: the
whole service in the test process over httpx's ASGI transport, its workers
real: support/asgi_service.py), service/process/ (what needs service
processes: walls, signals, several front ends, hostile TCP, restarts; each
module's docstring says why in a `Why a process:` line, test_test_layout.py),
service/fleet/ (replicas on S3 and PostgreSQL), e2e/ (the packaged service,
the container, the browser, builds, deployment files, the README), and the repository-wide rules here. What they
share is in support/ (a package: `from support.service_harness import ...`;
the folders of tests are not packages, each is put on sys.path by pytest, and
their module names are unique). Shared server fixtures are in
support/servers.py and support/fleet.py, plugins of this file (`pytest_plugins`):
mypy sees every conftest.py as the one module `conftest`, so there is no other.

The ONNX backend test data is generated once per machine into the ignored
cache `.cache/onnx-backend` by `tools/gen_backend_data.py` (idempotent).

The session stops before any test when the importer under test is not the
build it should be: IMPORTER_EXPECT_BUILD (compiled or pure, set by
tools/dev.sh for each run) differs from `importer.BUILD`, the build is
"mixed", or a compiled module in the checkout is older than its source (an
editable compiled install not rebuilt since: `bash tools/dev.sh setup`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

TESTS = Path(__file__).resolve().parent


def _import_the_project() -> None:
    """The project's `importer` and `service`, imported before any test module.

    tests/importer/ and tests/service/ are folders of tests, not packages. With
    tests/ on sys.path (pytest puts it there for this file), Python would take
    them for namespace packages named `importer` and `service` wherever the
    project's own packages are found only by the editable install's finder
    (`.venv/bin/pytest`; PYTHONSAFEPATH=1, as in tools/dev.sh's pure-build run).
    Imported once here without tests/ on the path, the real ones are the ones
    every later import finds.
    """
    saved = sys.path[:]
    sys.path[:] = [entry for entry in saved if Path(entry or os.curdir).resolve() != TESTS]
    try:
        import importer  # noqa: F401
        import service  # noqa: F401
    finally:
        sys.path[:] = saved


_import_the_project()
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))  # the shared helpers: `from support.service_harness import ...`

from support.paths import BACKEND_DATA, REPO, TOOLS  # noqa: E402

if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))  # the tools the tests use: `import onnx_dump`

if TYPE_CHECKING:
    from support.wheel_builds import Wheels

pytest_plugins = [
    "support.servers",  # `server`, `client`, `data_root`: one service per module
    "support.fleet",  # `fleet_servers`: PostgreSQL and S3 for the fleet store, one per session
    "support.explorer_browser",  # `browser`, `watched`: headless Chromium for the explorer's tests
    "support.tensor_models",  # `big` and its kin: a 4 MiB tensor uploaded and imported by path, for the tensor-bytes tests
]

SWEEP_REPORT: list[str] = []  # the `report` fixture's lines, in the process that prints the summary
FIGURE = "figure"  # their user_properties key


@pytest.fixture(scope="session")
def backend_manifest() -> dict[str, Any]:
    """The manifest of the generated backend test data (see gen_backend_data.py)."""
    import gen_backend_data

    return gen_backend_data.build(BACKEND_DATA)


@pytest.fixture(scope="session")
def backend_dir(backend_manifest: dict[str, Any]) -> Path:
    return BACKEND_DATA


@pytest.fixture(scope="session")
def wheels() -> Wheels:
    """The project's wheels by IMPORTER_BUILD, each built once for the sources as they are
    (tests/support/wheel_builds.py, .cache/wheels/): pytest-xdist's workers share them."""
    from support.wheel_builds import Wheels

    return Wheels()


@pytest.fixture()
def report(request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """Lines a test wants shown in the run's closing summary (counts, timings).

    They travel in the test's report (`user_properties`), so a pytest-xdist
    worker's lines reach the process that prints the summary."""
    lines: list[str] = []
    yield lines
    request.node.user_properties.extend((FIGURE, line) for line in lines)


def stale_compiled_modules(package: Path) -> list[str]:
    """Sources in `package` changed after the compiled module beside them was built."""
    stale = []
    for built in package.iterdir():
        source = package / (built.name.split(".")[0] + ".py")
        if built.name.endswith(tuple(EXTENSION_SUFFIXES)) and source.exists() and source.stat().st_mtime > built.stat().st_mtime:
            stale.append(source.name)
    return sorted(stale)


def build_problem() -> str | None:
    """Why this session must not test the importer it imports (None: it may)."""
    import importer

    package = Path(importer.__file__ or "").resolve().parent
    expected = os.environ.get("IMPORTER_EXPECT_BUILD", "")
    if importer.BUILD == "mixed":
        return f"the importer in {package} is a mix of compiled and pure modules: reinstall it (bash tools/dev.sh setup)"
    if expected and expected != importer.BUILD:
        return f"IMPORTER_EXPECT_BUILD={expected} but the importer in {package} is the {importer.BUILD} build"
    stale = stale_compiled_modules(package) if package.is_relative_to(REPO) and importer.BUILD == "compiled" else []
    if stale:
        return f"compiled modules in {package} are older than their sources ({', '.join(stale)}): rebuild them (bash tools/dev.sh setup)"
    return None


def pytest_sessionstart(session: pytest.Session) -> None:
    problem = build_problem()
    if problem is not None:
        pytest.exit(f"wrong importer build: {problem}", returncode=pytest.ExitCode.USAGE_ERROR)


def pytest_report_header() -> str:
    import importer

    return f"importer: {importer.BUILD} build, from {Path(importer.__file__ or '').parent}"


# The modules that take longest (half a minute or more of one core each, in
# `--durations` of a clean clone's run), longest first: pytest-xdist hands out
# modules in collection order, so a long one started last would keep one core
# busy alone at the end. The two that build the image are apart, and
# test_builds comes after test_packaged_service, whose wheel it shares (built
# once, under a lock: the other would wait).
LONGEST_FIRST = (
    "e2e/test_container.py",
    "e2e/test_readme.py",
    "e2e/test_packaged_service.py",
    "service/fleet/test_fleet_soak.py",
    "service/process/test_registry_mlflow.py",
    "e2e/test_container_fleet.py",
    "importer/test_fuzz.py",
    "e2e/test_ci_examples.py",
    "checks/test_check_sweep.py",
    "checks/test_runtime.py",
    "e2e/test_builds.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest modules first (LONGEST_FIRST), the rest in their order."""
    rank = {TESTS / name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path, len(rank)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown":
        SWEEP_REPORT.extend(str(line) for key, line in report.user_properties if key == FIGURE)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SWEEP_REPORT:
        terminalreporter.section("figures")
        for line in SWEEP_REPORT:
            terminalreporter.write_line(line)
