"""The OCI gate's verdicts kept while the registry does not take them (service.registry.oci_pending, over the
kept-writes core both gates share, service.registry.kept), against a registry made in process (httpx's
MockTransport, distribution 2.8's answers: no referrers API, the `sha256-<hex>` tag's index):

- a referrer the registry does not answer for (503) or refuses the service's credentials for (401) is kept,
  one per artifact, and pushed by a later drain once it answers; a drain stops at the first write the
  registry does not answer for (the others wait too);
- one it refuses for good is dropped: the artifact's manifest deleted meanwhile (404), the referrer itself
  refused (400); so is one whose artifact has a verdict referrer by then, one kept for another registry, and
  one past the bounds;
- the hook keeps the referrer whose push the registry misses when the verdict is due, and a validation the
  service's shutdown cuts off is run again by the next drain the registry answers, without a new event.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from service.registry import kept, oci_api
from service.registry.deliveries import Deliveries
from service.registry.kept import KeptWrites, Outcome
from service.registry.oci_api import OciRegistry
from service.registry.oci_artifact import Layer, subject_of
from service.registry.oci_hook import OciHook, Pushed
from service.registry.oci_pending import KeptVerdict, PendingVerdicts, kept_referrer
from service.registry.oci_verdict import verdict_document
from service.store.sql.registry_rows import RegistryRows
from service.store.sqlite.sqlite_index import SqliteIndex

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
MODELPACK = "application/vnd.cncf.model.manifest.v1+json"
VERDICT_JSON = "application/vnd.onnx-import.verdict.v1+json"
HOST = "registry.test"
TAGS = {"onnx_import.verdict": "pass", "onnx_import.checks": "schema=pass", "onnx_import.files": "[]"}


def _artifact(name: str) -> bytes:
    layer = {"mediaType": "application/vnd.cncf.model.weight.v1.raw", "digest": "sha256:" + "0" * 64, "size": 1,
             "annotations": {"org.cncf.model.filepath": f"{name}.onnx"}}  # fmt: skip
    return json.dumps({"schemaVersion": 2, "mediaType": MANIFEST, "artifactType": MODELPACK, "layers": [layer],
                       "config": {"mediaType": "application/vnd.cncf.model.config.v1+json"}}).encode()  # fmt: skip


class Registry:
    """Distribution 2.8 in memory: manifests by reference, no referrers API; `state` says how it answers
    (up; down: 503 to everything; locked: 401 to everything); `refuse_referrers`: 400 to the referrer's PUT."""

    def __init__(self) -> None:
        self.manifests: dict[str, bytes] = {}
        self.state = "up"
        self.refuse_referrers = False
        self.asked = 0

    def holding(self, name: str) -> str:
        body = _artifact(name)
        digest = oci_api.sha256_digest(body)
        self.manifests[digest] = body
        return digest

    def answer(self, request: httpx.Request) -> httpx.Response:
        self.asked += 1
        if self.state == "down":
            return httpx.Response(503, text="the registry restarts")
        if self.state == "locked":
            return httpx.Response(401, text="UNAUTHORIZED")
        path = request.url.path
        if request.method == "POST":
            return httpx.Response(202, headers={"Location": "/v2/models/net/blobs/uploads/1"})
        if request.method == "PUT" and "/blobs/" in path:
            return httpx.Response(201)
        if "/referrers/" in path:
            return httpx.Response(404)
        reference = path.rpartition("/")[2]
        if request.method == "PUT":
            if self.refuse_referrers and b'"subject"' in request.content:
                return httpx.Response(400, text="MANIFEST_INVALID")
            self.manifests[reference] = request.content
            return httpx.Response(201)
        if reference in self.manifests:
            body = self.manifests[reference]
            return httpx.Response(200, content=body, headers={"Content-Type": json.loads(body)["mediaType"]})
        return httpx.Response(404, text="MANIFEST_UNKNOWN")

    def verdicts_of(self, digest: str) -> list[dict[str, Any]]:
        """The gate's referrers of `digest` listed under the referrers tag schema's tag."""
        index = self.manifests.get(digest.replace(":", "-", 1))
        return [entry for entry in json.loads(index)["manifests"] if entry["artifactType"] == VERDICT_JSON] if index else []


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oci_api, "BACKOFF", (0.0, 0.0, 0.0))  # the retries still made, without their waits


@pytest.fixture
def registry() -> Registry:
    return Registry()


@pytest.fixture
def rows(tmp_path: Path) -> Iterator[RegistryRows]:
    index = SqliteIndex(tmp_path / "index")
    index.open()
    yield index.registry_rows()
    index.close()


def _client(registry: Registry) -> OciRegistry:
    return OciRegistry(f"http://{HOST}", transport=httpx.MockTransport(registry.answer))


def _kept(registry: Registry, digest: str, host: str = HOST) -> KeptVerdict:
    subject = subject_of(MANIFEST, digest, len(registry.manifests[digest]), json.loads(registry.manifests[digest]))
    return kept_referrer(host, "models/net", digest, subject, TAGS, verdict_document(TAGS, host, "models/net", digest), {})


async def _never_validated(kept: KeptVerdict) -> None:
    raise AssertionError(f"{kept.key()} is no validation to run again")


def _drained(pending: PendingVerdicts, registry: Registry) -> int:
    return asyncio.run(pending.drain(_client(registry), _never_validated))


def test_a_referrer_the_registry_does_not_take_is_kept_and_pushed_once_it_does(tmp_path: Path, registry: Registry) -> None:
    first, second = registry.holding("first"), registry.holding("second")
    pending = PendingVerdicts(tmp_path / "oci-pending")
    pending.keep(_kept(registry, first))
    pending.keep(_kept(registry, first))  # the same artifact again: one entry
    pending.keep(_kept(registry, second))
    assert len(pending.waiting()) == 2
    registry.state = "down"
    assert _drained(pending, registry) == 0 and len(pending.waiting()) == 2
    assert registry.asked == len(oci_api.BACKOFF) + 1  # one call retried, then the other write waits too
    registry.state = "locked"
    assert _drained(pending, registry) == 0 and len(pending.waiting()) == 2  # the service's credentials can be fixed: kept
    registry.state = "up"
    assert _drained(pending, registry) == 2 and pending.waiting() == []
    for digest in (first, second):
        (entry,) = registry.verdicts_of(digest)
        referrer = json.loads(registry.manifests[entry["digest"]])
        assert referrer["subject"]["digest"] == digest and referrer["annotations"]["org.onnx-import.verdict"] == "pass"
    assert _drained(pending, registry) == 0  # nothing left to push


def test_a_kept_referrer_refused_for_good_is_dropped(tmp_path: Path, registry: Registry, caplog: pytest.LogCaptureFixture) -> None:
    deleted, refused, verdicted, elsewhere = (registry.holding(name) for name in ("deleted", "refused", "verdicted", "elsewhere"))
    pending = PendingVerdicts(tmp_path / "oci-pending")
    pending.keep(_kept(registry, verdicted))
    assert _drained(pending, registry) == 1 and len(registry.verdicts_of(verdicted)) == 1
    pending.keep(_kept(registry, verdicted))  # its verdict kept again (a validation of another replica)
    for digest in (deleted, refused):
        pending.keep(_kept(registry, digest))
    pending.keep(_kept(registry, elsewhere, host="old-registry.test"))  # --oci-registry changed since
    del registry.manifests[deleted]  # the artifact deleted meanwhile
    registry.refuse_referrers = True
    with caplog.at_level(logging.INFO, logger="service"):
        assert _drained(pending, registry) == 0
    assert pending.waiting() == []
    assert len(registry.verdicts_of(verdicted)) == 1 and registry.verdicts_of(refused) == []
    assert f"oci://{HOST}/models/net@{verdicted} has a verdict referrer by now: the kept one is dropped" in caplog.text
    assert f"oci://{HOST}/models/net@{deleted} was refused (the registry answered 404: no manifest" in caplog.text
    assert "the service's registry is registry.test now" in caplog.text
    assert f"oci://{HOST}/models/net@{refused} was refused (the registry answered 400: the manifest was not taken" in caplog.text


def test_a_kept_write_past_its_bounds_is_not_kept(
    tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    digest = registry.holding("net")
    small = KeptWrites(tmp_path / "small", KeptVerdict, 100, "oci")
    assert not small.keep(_kept(registry, digest)) and small.waiting() == []
    monkeypatch.setattr(kept, "MAX_WAITING", 1)
    few = KeptWrites(tmp_path / "few", KeptVerdict, 1 << 20, "oci")
    assert few.keep(_kept(registry, digest)) and few.keep(_kept(registry, digest))  # the same artifact: replaced
    assert not few.keep(_kept(registry, registry.holding("other"))) and len(few.waiting()) == 1
    assert "writes wait already" in caplog.text and "more than 100" in caplog.text
    (few.folder / ("0" * 64 + ".json")).write_text('["not", "a", "verdict"]')

    async def written(_: KeptVerdict) -> Outcome:
        return Outcome.WRITTEN

    assert asyncio.run(few.drain(written)) == 1 and few.waiting() == []  # the unreadable one dropped, logged
    assert "is unreadable" in caplog.text


class Checked(OciHook):
    """The hook with its checks stood in for (`verdicts`: what each validation's checks give, in turn; a
    validation waits on `hold` first): what it does with the verdict is what is shown."""

    def __init__(self, tmp_path: Path, registry: Registry, rows: RegistryRows) -> None:
        self.parts = SimpleNamespace(settings=SimpleNamespace(oci_tenant="oci"))  # type: ignore[assignment]
        self.registry = _client(registry)
        self.deliveries = Deliveries(rows)
        self.pending = PendingVerdicts(tmp_path / "oci-pending")
        self.tasks = {}
        self.hold = asyncio.Event()
        self.hold.set()
        self.validations = 0

    async def _checked(self, pushed: Pushed, layers: list[Layer], bundles: dict[str, bytes]) -> dict[str, str]:
        self.validations += 1
        await self.hold.wait()
        return dict(TAGS)


def test_the_hook_keeps_the_referrer_the_registry_misses_and_the_loop_pushes_it(
    tmp_path: Path, registry: Registry, rows: RegistryRows
) -> None:
    digest = registry.holding("net")

    async def run() -> None:
        hook = Checked(tmp_path, registry, rows)
        hook.hold.clear()
        task = asyncio.create_task(hook.validate(Pushed("models/net", digest, "e1")))
        await asyncio.sleep(0.05)
        registry.state = "down"  # the registry goes away while the model is checked: the verdict is due then
        hook.hold.set()
        await task
        assert registry.verdicts_of(digest) == [] and len(hook.pending.waiting()) == 1
        await hook.tick()
        assert len(hook.pending.waiting()) == 1
        registry.state = "up"
        await hook.tick()
        assert hook.pending.waiting() == [] and len(registry.verdicts_of(digest)) == 1
        assert hook.validations == 1  # pushed as kept, not validated again

    asyncio.run(run())


def test_a_validation_the_shutdown_cuts_off_runs_again_at_the_next_drain(tmp_path: Path, registry: Registry, rows: RegistryRows) -> None:
    digest = registry.holding("net")

    async def stopped() -> None:
        hook = Checked(tmp_path, registry, rows)
        hook.hold.clear()  # the checks never end: the service stops during them
        hook.start(Pushed("models/net", digest, "e1"))
        await asyncio.sleep(0.05)
        async with hook.running():
            pass  # leaving it stops the validations under way
        assert len(hook.pending.waiting()) == 1 and registry.verdicts_of(digest) == []

    async def restarted() -> None:
        hook = Checked(tmp_path, registry, rows)
        registry.state = "down"
        await hook.tick()  # the next start's first tick, the registry down: nothing started, the validation still kept
        assert hook.tasks == {} and len(hook.pending.waiting()) == 1
        registry.state = "up"
        await hook.tick()
        assert hook.pending.waiting() == []
        await asyncio.gather(*hook.tasks)
        assert hook.validations == 1 and len(registry.verdicts_of(digest)) == 1

    asyncio.run(stopped())
    asyncio.run(restarted())
