"""The folder a model version's files are read from: `ProxyFolder` (MLflow's artifact proxy) or `BucketFolder`.

Both answer `listing()` (the folder's entries: path, is_dir, file_size) and
`download(path, target, max_bytes)` for a path below the folder, already
confined by `service.registry.sources`. A `BucketFolder` is an `s3://`
artifact location below the service's own `--data-root s3://BUCKET/PREFIX`,
read through the data root (`service.store.data_root.DataRoot`: `list` and
`fetch`, as the data root's models are); any other bucket is refused before this.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio.to_thread

from service.errors import NotFound
from service.registry.mlflow_api import Fetched, MlflowApi

if TYPE_CHECKING:
    from service.store.data_root import DataRoot


class ObjectMissing(Exception):
    """A path the folder does not hold."""


class ArtifactFolder(Protocol):
    @property
    def where(self) -> str: ...  # for people: the proxy's path, or the s3:// URL

    async def listing(self) -> list[dict[str, Any]]: ...

    async def download(self, path: str, target: Path, max_bytes: int) -> Fetched: ...


@dataclass(frozen=True, slots=True)
class ProxyFolder:
    api: MlflowApi
    path: str  # below /api/2.0/mlflow-artifacts/artifacts

    @property
    def where(self) -> str:
        return self.path

    async def listing(self) -> list[dict[str, Any]]:
        return await self.api.list_artifacts(self.path)

    async def download(self, path: str, target: Path, max_bytes: int) -> Fetched:
        return await self.api.download(f"{self.path}/{path}", target, max_bytes)


@dataclass(frozen=True, slots=True)
class BucketFolder:
    root: DataRoot
    key: str  # below the data root's prefix

    @property
    def where(self) -> str:
        return f"{self.root.url.rstrip('/')}/{self.key}"

    async def listing(self) -> list[dict[str, Any]]:
        found = await anyio.to_thread.run_sync(self.root.list, self.key)
        return [{"path": entry.name, "is_dir": True} if entry.is_dir else
                {"path": entry.name, "is_dir": False, "file_size": entry.size} for entry in found]  # fmt: skip

    async def download(self, path: str, target: Path, max_bytes: int) -> Fetched:
        try:
            fetched = await anyio.to_thread.run_sync(self.root.fetch, f"{self.key}/{path}", target, max_bytes)
        except NotFound:
            raise ObjectMissing(f"no object {path!r} in {self.where}") from None
        return Fetched(fetched.size, fetched.sha256)
