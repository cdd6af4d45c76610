"""The layering rules.

The importer: importer/ imports nothing from service/, onnx, sockets or
subprocesses, and only importer/source.py touches the file system; in the
service only the check worker's shape, runtime and smoke stages import onnx
or onnxruntime, and only inside the functions that run them. (ruff's banned-api rule enforces the same on every
lint run; this test proves the rule holds on the tree as committed.)

The service's layers: the worker package (what runs in the fork) holds nothing
of the front end; below `service.api` (and in `service.registry`, the MLflow
hook's use case) nothing sees the web framework, nor the service's state
(they are handed `ImportParts`); routes
never touch store paths; only `service.store` names and opens store files.
The first two follow imports transitively, through every service module an
import reaches (at its top or inside a function), and name the chain."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable
from pathlib import Path

from support.paths import REPO

BANNED_IN_IMPORTER = {"service", "onnx", "socket", "subprocess", "multiprocessing", "fastapi", "starlette", "http", "urllib"}
FILE_SYSTEM_CALLS = {"open", "mmap", "realpath", "stat", "fstat", "listdir", "scandir", "exists", "isfile"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_importer_imports_nothing_it_must_not() -> None:
    for path in sorted((REPO / "importer").rglob("*.py")):
        assert not _imports(path) & BANNED_IN_IMPORTER, path


def test_only_the_source_module_touches_the_file_system() -> None:
    for path in sorted((REPO / "importer").rglob("*.py")):
        if path.name == "source.py":
            continue
        tree = ast.parse(path.read_text())
        calls = {
            node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
        }
        assert not calls & FILE_SYSTEM_CALLS, f"{path.name} calls {calls & FILE_SYSTEM_CALLS}"


# The check stages that hand the model to onnx and onnxruntime, inside the check worker
# (inferred_types reads the types onnx's inference hands the shape stage).
ONNX_USERS = {
    REPO / "service" / "checks" / "stages" / name for name in ("shape.py", "inferred_types.py", "runtime.py", "smoke.py")
}


def test_only_the_check_worker_stages_import_onnx() -> None:
    for path in sorted((REPO / "service").rglob("*.py")):
        if path not in ONNX_USERS:
            assert not _imports(path) & {"onnx", "onnxruntime"}, path


def test_the_check_stages_import_onnx_only_when_they_run() -> None:
    """Lazily, inside the stage: without the runtime extra the service starts,
    and the stages say they are incomplete."""
    for path in sorted(ONNX_USERS):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                names = {alias.name.split(".")[0] for alias in node.names}
                assert not names & {"onnx", "onnxruntime"}, f"{path.name} imports {names} at its top level"
            elif isinstance(node, ast.ImportFrom):
                names = {(node.module or "").split(".")[0]}
                assert not names & {"onnx", "onnxruntime"}, f"{path.name} imports {names} at its top level"


# --- the service's layers (each package's docstring says what it may import)

SERVICE = REPO / "service"
FRONT_END = (
    "service.api", "service.imports", "service.store", "service.api.state", "service.access", "service.observability", "service.app",
    "service.registry",
)  # fmt: skip
# The web framework and the HTTP server. python-multipart is not among them: it parses the multipart/form-data
# format (RFC 7578) of an upload's body, which the import pipeline's multipart source reads (service.imports.sources.multipart).
WEB = {"fastapi", "starlette", "uvicorn", "h11"}
STORE_INTERNALS = ("service.store.local", "service.store.files", "service.store.work_area", "service.store.layout")
# The store's file and folder names (service.store.layout, service.store.local): nobody else spells them.
STORE_NAMES = {
    "record.json", "lru", "usage", "lock", "index.sqlite", "catalog.sqlite", "summary.json", "graph.json", "converted.bin", "tenants",
}  # fmt: skip


def _modules(path: Path) -> set[str]:
    """Every module `path` imports, by its full name (`from a.b import c` gives a.b and a.b.c)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _under(*folder: str) -> list[Path]:
    return sorted(SERVICE.joinpath(*folder).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


SERVICE_MODULES = {_module_name(path): path for path in SERVICE.rglob("*.py")}


@functools.cache
def _direct(module: str) -> frozenset[str]:
    """What `module` imports: the service's modules (and the packages above
    them, which Python imports first) by their full names, others by their top name
    (remembered: each module is parsed once for all the chains)."""
    found: set[str] = set()
    for name in _modules(SERVICE_MODULES[module]):
        parts = name.split(".")
        found.update(prefix for prefix in (".".join(parts[:end]) for end in range(1, len(parts) + 1)) if prefix in SERVICE_MODULES)
        if parts[0] != "service":
            found.add(parts[0])
    return frozenset(found)


def _chains(module: str, wrong: Callable[[str], bool]) -> list[str]:
    """The import chains from `module` to each `wrong` module it reaches, transitively."""
    came_from: dict[str, str | None] = {module: None}
    queue, found = [module], []
    while queue:
        current = queue.pop(0)
        if current != module and wrong(current):
            chain, step = [current], came_from[current]
            while step is not None:
                chain.append(step)
                step = came_from[step]
            found.append(" -> ".join(reversed(chain)))
            continue
        if current in SERVICE_MODULES:
            for name in sorted(_direct(current) - came_from.keys()):
                came_from[name] = current
                queue.append(name)
    return found


# What runs in the fork: the worker's entry and walls, its tasks, and the check stages they run.
IN_THE_FORK = (("sandbox", "worker"), ("tasks",), ("checks", "stages"))


def test_what_runs_in_the_fork_holds_nothing_of_the_front_end() -> None:
    for folder in IN_THE_FORK:
        for path in _under(*folder):
            found = _chains(_module_name(path), lambda name: name.startswith(FRONT_END))
            assert not found, f"{path.relative_to(REPO)} (it runs in the fork) reaches the front end: {found}"


def _sees_http(name: str) -> bool:
    return name in WEB or name.startswith("service.api")


def test_below_http_nothing_knows_the_web_framework() -> None:
    for folder in ("imports", "store", "sandbox", "registry", "tasks", "checks"):
        for path in _under(folder):
            found = _chains(_module_name(path), _sees_http)
            assert not found, f"{path.relative_to(REPO)} must not see HTTP, and reaches it: {found}"


def test_the_use_cases_are_handed_their_parts_not_the_service() -> None:
    """The import use cases and the registry's gate take `ImportParts`
    (`service.imports.parts`): the service's state (`service.api.state`: its API
    keys, metrics, readiness, uploads in the making) is the HTTP layer's."""
    for folder in ("imports", "registry", "store", "sandbox", "tasks", "checks"):
        for path in _under(folder):
            found = _chains(_module_name(path), lambda name: name == "service.api.state")
            assert not found, f"{path.relative_to(REPO)} reaches the service's state: {found}"


def test_the_transitive_check_follows_a_chain() -> None:
    """What the two tests above rely on: a module reached only through
    another one is found, and the chain named."""
    assert "service.api.state" not in _modules(SERVICE / "api" / "routes" / "webhooks.py")  # it reaches the state through others
    chains = _chains("service.api.routes.webhooks", lambda name: name == "service.api.state")
    assert chains and chains[0].count(" -> ") >= 2 and chains[0].endswith(" -> service.api.state"), chains


def test_routes_never_touch_store_paths() -> None:
    for path in _under("api"):
        found = {name for name in _modules(path) if name.startswith(STORE_INTERNALS)}
        assert not found, f"{path.relative_to(REPO)} imports {sorted(found)}: ask the store, not its files"
        attributes = {node.attr for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute)}
        reached = attributes & {"folder", "content", "index", "work_area"}
        assert not reached, f"{path.relative_to(REPO)} reaches into the store: {sorted(reached)}"


def test_only_the_store_names_and_opens_store_files() -> None:
    for path in sorted(SERVICE.rglob("*.py")):
        if path.is_relative_to(SERVICE / "store"):
            continue
        allowed = ("service.store.layout",) if path.is_relative_to(SERVICE / "imports") else ()  # a request's work folder
        found = {name for name in _modules(path) if name.startswith(STORE_INTERNALS) and not name.startswith(allowed)}
        assert not found, f"{path.relative_to(REPO)} imports {sorted(found)}"
        constants = [node.value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)]
        strings = {value for value in constants if isinstance(value, str)}
        named = strings & STORE_NAMES
        assert not named, f"{path.relative_to(REPO)} names store files {sorted(named)}"


def test_the_client_speaks_http_only() -> None:
    for path in _under("client"):
        found = {name for name in _modules(path) if name.startswith("service.") and not name.startswith("service.client")}
        assert not found, f"{path.relative_to(REPO)} imports {sorted(found)}: the client reaches the service over HTTP only"


# --- the packages' own rules, as their headers state them


@functools.cache
def _header_rules(package: Path) -> tuple[list[str], list[str]] | None:
    """What a package's `__init__` header says its modules may import and
    never import: the backticked `service...` names of its "May import:"
    paragraph, before and after its "Never"; None if it states no rule."""
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    paragraph = next((part for part in docstring.split("\n\n") if part.startswith("May import:")), None)
    if paragraph is None:
        return None
    allowed_text, _, never_text = paragraph.partition("Never")

    def named(text: str) -> list[str]:
        return re.findall(r"`(service(?:\.\w+)*)", text)

    return named(allowed_text), named(never_text)


PACKAGES = sorted(path.parent for path in SERVICE.rglob("__init__.py"))


def test_every_package_states_what_it_may_import() -> None:
    missing = [str(package.relative_to(REPO)) for package in PACKAGES if package != SERVICE and _header_rules(package) is None]
    assert not missing, f"packages without a 'May import:' paragraph in their header: {missing}"


def test_each_package_imports_only_what_its_header_allows() -> None:
    """Direct imports of every module, against the nearest package header
    that states a rule: its own package and the names listed are allowed
    (a name allows what is under it), the names after "Never" are not."""
    wrong = []
    for path in sorted(SERVICE.rglob("*.py")):
        if path.parent == SERVICE:
            continue  # the root's modules (the app, the entry point) assemble everything
        package = path.parent
        while (rules := _header_rules(package)) is None:
            package = package.parent
        allowed, never = rules
        own = _module_name(package / "__init__.py")
        for name in sorted(_modules(path)):
            if not name.startswith("service.") or name not in SERVICE_MODULES or name == own or name.startswith(own + "."):
                continue
            if any(name == banned or name.startswith(banned + ".") for banned in never) or not any(
                name == ok or name.startswith(ok + ".") for ok in allowed
            ):
                wrong.append(f"{path.relative_to(REPO)} imports {name} (its header, {package.relative_to(REPO)}: {allowed}, never {never})")
    assert not wrong, "\n".join(wrong)


def test_no_two_modules_share_a_name() -> None:
    by_name: dict[str, list[str]] = {}
    for path in SERVICE.rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py"):
            by_name.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, shared


def test_the_root_holds_at_most_six_modules() -> None:
    root = sorted(path.name for path in SERVICE.glob("*.py"))
    assert len(root) <= 6, root
