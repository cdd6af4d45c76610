"""The tests' own layout: API behaviour runs in the test process, and a test
module that starts service processes says why.

Every module under tests/service/process/ carries, in its module docstring,
a line starting `Why a process:` with its reason (walls, signals, several
front ends, hostile TCP, the packaged service: what an in-process service
cannot show). A module under tests/service/api/ serves the app in the test
process (support.asgi_service, or support.in_process_service for a client
that opens its own connections); the few that also start a service process
for one test are listed here with the reason, and no other may.
"""

from __future__ import annotations

import ast
from pathlib import Path

from support.paths import REPO

PROCESS_TESTS = REPO / "tests" / "service" / "process"
API_TESTS = REPO / "tests" / "service" / "api"
WHY = "Why a process:"
# What starts a service process (support.service_harness)
STARTS_A_PROCESS = {"ServiceProcess", "serving", "saturated"}
# API modules with a test that starts a service process, and why that test needs one
PROCESSES_IN_API = {
    "test_checks_service.py": "a service without the runtime extra: its fork server's PYTHONPATH its own",
    "test_client.py": "a saturated server (its one import place held by a sleeping worker) for the client's 503 retries",
    "test_client_commands.py": "a server that comes up on a port the command line is already retrying, and a saturated one",
}


def modules(folder: Path) -> list[Path]:
    return sorted(folder.glob("test_*.py"))


def harness_names(path: Path) -> set[str]:
    """The names a module imports from support.service_harness."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "support.service_harness":
            names.update(alias.name for alias in node.names)
    return names


def test_every_process_module_says_why_it_needs_a_process() -> None:
    found = modules(PROCESS_TESTS)
    assert found, PROCESS_TESTS
    missing = []
    for path in found:
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        reasons = [line for line in docstring.splitlines() if line.startswith(WHY)]
        if len(reasons) != 1 or not reasons[0].removeprefix(WHY).strip():
            missing.append(path.name)
    assert missing == [], f"each needs one docstring line starting {WHY!r} with its reason: {missing}"


def test_api_modules_run_in_the_test_process() -> None:
    found = modules(API_TESTS)
    assert len(found) >= 10, API_TESTS
    starting = {path.name for path in found if harness_names(path) & STARTS_A_PROCESS}
    assert starting <= set(PROCESSES_IN_API), f"API modules starting a service process, not listed: {starting - set(PROCESSES_IN_API)}"
    assert set(PROCESSES_IN_API) <= starting, f"listed but starting no process any more: {set(PROCESSES_IN_API) - starting}"


def test_no_module_is_both_an_api_and_a_process_test() -> None:
    """Module names are unique across the test folders (they are not packages): a split module takes a new name."""
    assert not {path.name for path in modules(API_TESTS)} & {path.name for path in modules(PROCESS_TESTS)}
