"""The server fixtures the service's test modules share (a pytest plugin:
tests/conftest.py names it in `pytest_plugins`, so there is one conftest.py).

`server` is the service with the default settings and a store of its own,
over `data_root`, started once per module: a real `python -m service`, or,
for a module in tests/service/api/ (API behaviour), the same service in the
test process over httpx's ASGI transport (support.asgi_service; on a
loopback port, support.in_process_service, for a module that sets
`ON_A_PORT = True`: its client opens connections of its own); `client` is an
httpx client on it. `data_root` is a copy of the samples: a module that needs more
files overrides it (module-scoped), one that needs other settings defines its
own `server`. Nothing is started for a module that asks for none of these.

`store_kind` says which store those services use: a module marked
`both_stores` (behaviour the store's kind may change) runs twice, on the local
store and on the fleet store (the session's S3 and PostgreSQL:
support/fleet.py), each test's id ending in [local] or [fleet];
ONNX_TEST_STORE=local or fleet runs one kind only. A module's own
module-scoped service fixture asks for `store_kind`, so it starts again for
the second kind.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import httpx

    from support.service_harness import ServiceUnderTest


STORE_KINDS = ("local", "fleet")


def store_kinds() -> tuple[str, ...]:
    """The kinds a both_stores module runs on: both, or the one ONNX_TEST_STORE names."""
    chosen = os.environ.get("ONNX_TEST_STORE", "")
    if chosen and chosen not in STORE_KINDS:
        raise pytest.UsageError(f"ONNX_TEST_STORE={chosen}: expected one of {', '.join(STORE_KINDS)}, or unset for both")
    return (chosen,) if chosen else STORE_KINDS


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A module marked both_stores runs once per store kind: every test of it
    on the local store, then every test on the fleet store (module-scoped, so
    its services start once per kind)."""
    if metafunc.definition.get_closest_marker("both_stores") is not None:
        metafunc.parametrize("store_kind", store_kinds(), indirect=True, scope="module")


@pytest.fixture(scope="module", autouse=True)
def store_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    """The store every service the module starts uses: `local` (a folder), or,
    in a both_stores module's second round, `fleet`: the session's S3 and
    PostgreSQL (support.service_harness.FLEET), its variables put back after.
    A module-scoped fixture that starts a service asks for this one, so it
    starts again for the next kind."""
    from support import service_harness

    kind: str = getattr(request, "param", "local")
    if kind != "fleet":
        yield kind
        return
    servers = request.getfixturevalue("fleet_servers")
    saved = {name: os.environ.get(name) for name in servers.environ}
    service_harness.FLEET = servers
    try:
        yield kind
    finally:
        service_harness.FLEET = None
        for name, value in saved.items():  # an in-process service sets the S3 client's variables
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On the fleet store, the tests that read the local store's files skip, saying so."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("store_kind") == "fleet" and item.get_closest_marker("local_store"):
            item.add_marker(pytest.mark.skip(reason="reads the local store's files; the fleet store keeps them on S3"))


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory, store_kind: str) -> Path:
    """The samples, copied: a data root the module's tests may add files to."""
    from support.service_harness import copy_samples

    return copy_samples(tmp_path_factory.mktemp("data") / "root")


@pytest.fixture(scope="module")
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, data_root: Path, store_kind: str
) -> Iterator[ServiceUnderTest]:
    """The module's service: default settings, its own store. For tests/service/api/, in the
    test process: over httpx's ASGI transport (support.asgi_service), or, for a module
    whose client opens connections of its own (`ON_A_PORT = True`: a command line run as
    a subprocess, a TCP proxy), on a loopback port (support.in_process_service); else a process."""
    from support.asgi_service import serving_over_asgi
    from support.in_process_service import serving_in_process
    from support.service_harness import serving

    start: Callable[..., AbstractContextManager[ServiceUnderTest]] = serving
    if request.path.parent.name == "api":
        start = serving_in_process if getattr(request.module, "ON_A_PORT", False) else serving_over_asgi
    with start(tmp_path_factory.mktemp("store") / "store", data_root) as service:
        yield service


@pytest.fixture()
def client(server: ServiceUnderTest) -> Iterator[httpx.Client]:
    with server.client() as session:
        yield session
