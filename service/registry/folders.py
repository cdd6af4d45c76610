"""The folder a model version's files are read from: `ProxyFolder` (MLflow's artifact proxy) or `BucketFolder`.

Both answer `listing()` (the folder's entries: path, is_dir, file_size) and
`download(path, target, max_bytes)` for a path below the folder, already
confined by `service.registry.sources`. A `BucketFolder` is an `s3://`
artifact location below the service's own `--data-root s3://BUCKET/PREFIX`,
read with the service's S3 client (`service.store.s3.bucket_root.BucketRoot`,
as the data root's objects are); any other bucket is refused before this.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio.to_thread

from service.errors import NotFound
from service.registry.mlflow_api import Fetched, MlflowApi

if TYPE_CHECKING:
    from service.store.s3.bucket_root import BucketRoot


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
    root: BucketRoot
    key: str  # below the data root's prefix

    @property
    def where(self) -> str:
        return f"{self.root.url.rstrip('/')}/{self.key}"

    async def listing(self) -> list[dict[str, Any]]:
        import obstore  # the fleet extra's: a bucket folder exists only where the data root is a bucket

        found = await anyio.to_thread.run_sync(lambda: obstore.list_with_delimiter(self.root.store, prefix=self.key))
        entries: list[dict[str, Any]] = [
            {"path": posixpath.basename(item["path"]), "is_dir": False, "file_size": item["size"]} for item in found["objects"]
        ]
        entries += [{"path": posixpath.basename(prefix), "is_dir": True} for prefix in found["common_prefixes"]]
        return entries

    async def download(self, path: str, target: Path, max_bytes: int) -> Fetched:
        try:
            fetched = await anyio.to_thread.run_sync(self.root.fetch, f"{self.key}/{path}", target, max_bytes)
        except NotFound:
            raise ObjectMissing(f"no object {path!r} in {self.where}") from None
        return Fetched(fetched.size, fetched.sha256)
