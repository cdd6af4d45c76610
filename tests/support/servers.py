"""The server fixtures the service's test modules share (a pytest plugin:
tests/conftest.py names it in `pytest_plugins`, so there is one conftest.py).

`server` is the service with the default settings and a store of its own,
over `data_root`, started once per module: a real `python -m service`, or,
for a module in tests/service/api/ (API behaviour), the same service in the
test process (support.in_process_service); `client` is an httpx client on
it. `data_root` is a copy of the samples: a module that needs more
files overrides it (module-scoped), one that needs other settings defines its
own `server`. Nothing is started for a module that asks for none of these.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import httpx

    from support.service_harness import ServiceUnderTest


@pytest.fixture(scope="session", autouse=True)
def fleet_mode(request: pytest.FixtureRequest) -> None:
    """With ONNX_TEST_STORE=fleet, every service process the tests start stores
    on the session's S3 and PostgreSQL (support.service_harness)."""
    from support import service_harness

    if service_harness.FLEET_MODE:
        service_harness.FLEET = request.getfixturevalue("fleet_servers")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """In fleet mode, the tests that read the local store's files skip, saying so."""
    from support.service_harness import FLEET_MODE

    if FLEET_MODE:
        for item in items:
            if item.get_closest_marker("local_store"):
                item.add_marker(pytest.mark.skip(reason="reads the local store's files; ONNX_TEST_STORE=fleet stores on S3"))


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The samples, copied: a data root the module's tests may add files to."""
    from support.service_harness import copy_samples

    return copy_samples(tmp_path_factory.mktemp("data") / "root")


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, data_root: Path) -> Iterator[ServiceUnderTest]:
    """The module's service: default settings, its own store; in the test process for tests/service/api/."""
    from support.in_process_service import serving_in_process
    from support.service_harness import serving

    start = serving_in_process if request.path.parent.name == "api" else serving
    with start(tmp_path_factory.mktemp("store") / "store", data_root) as service:
        yield service


@pytest.fixture()
def client(server: ServiceUnderTest) -> Iterator[httpx.Client]:
    with server.client() as session:
        yield session
