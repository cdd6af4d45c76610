"""`/readyz` and `/metrics` show the import places per tenant, naming none
(`service.imports.admission`): the busy tenants' count and the most one
holds for everyone, and a caller's own places to that caller. The places are
held by a second admission on the app's shared folder, as another front-end
process holds them; the app runs in process (`create_app`, a TestClient)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path

from fastapi.testclient import TestClient
from in_process import InProcessSandbox
from test_app_in_process import SAMPLES

from service.app import create_app
from service.imports.admission import Admission
from service.settings import Settings

SECRETS = {"alice": b"alice-secret", "bob": b"bob-secret", "monitoring": b"monitoring-secret"}


def _bearer(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {SECRETS[tenant].decode()}"}


def test_readiness_and_metrics_show_places_per_tenant_naming_none(tmp_path: Path) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text("".join(
        f'[[key]]\nsha256 = "{hashlib.sha256(secret).hexdigest()}"\ntenant = "{tenant}"\n'
        f'scopes = {["metrics"] if tenant == "monitoring" else ["import", "read"]}\n'.replace("'", '"')
        for tenant, secret in SECRETS.items()
    ))  # fmt: skip
    settings = Settings(
        data_root=str(SAMPLES), store=str(tmp_path / "store"), store_backend="memory", workers=2, queue=6, store_min_free=0, api_keys=keys
    )
    shared = tmp_path / "shared"
    shared.mkdir()
    with TestClient(create_app(settings, InProcessSandbox(settings), shared_dir=shared)) as client:
        elsewhere = Admission(2, 6, settings.max_receiving, shared / "imports", settings.tenant_share)

        async def held() -> None:
            async with elsewhere.admitted("alice"), elsewhere.admitted("alice"), elsewhere.receiving("bob"):
                anonymous = client.get("/readyz")
                assert anonymous.status_code == 200, anonymous.text
                body = anonymous.json()
                assert "yours" not in body and "alice" not in anonymous.text and "bob" not in anonymous.text
                assert body["tenants_busy"] == 2 and body["imports_waiting"] == 2 and body["uploads_receiving"] == 1
                assert body["tenant_import_places"] == 4  # half of 2 workers and 6 waiting
                assert client.get("/readyz", headers=_bearer("alice")).json()["yours"] == {"running": 0, "waiting": 2, "receiving": 0}
                assert client.get("/readyz", headers=_bearer("bob")).json()["yours"] == {"running": 0, "waiting": 0, "receiving": 1}
                metrics = client.get("/metrics", headers=_bearer("monitoring")).text
                assert "onnx_import_tenants_busy 2.0" in metrics
                assert 'onnx_import_tenant_places_most{kind="waiting"} 2.0' in metrics
                assert 'onnx_import_tenant_places_most{kind="receiving"} 1.0' in metrics
                assert 'onnx_import_tenant_places_limit{kind="waiting"} 4.0' in metrics
                assert "alice" not in metrics and "bob" not in metrics

        asyncio.run(held())
        elsewhere.close()
        deadline = time.monotonic() + 5  # the count of busy tenants stands half a second
        while client.get("/readyz").json()["tenants_busy"] != 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
