"""Where a model version's files are, asked of MLflow only: `artifact_folder`, `model_files`.

The payload's `source` is never fetched: the gate asks MLflow for the
version, and resolves the `source` MLflow holds to a folder of its artifact
proxy (`/api/2.0/mlflow-artifacts/artifacts/...`), or of the service's own
bucket (`service.registry.folders`):

- `runs:/RUN/PATH`: the run's artifact URI (asked of MLflow), then PATH below it;
- `models:/m-ID` (a logged model): its artifact URI; `models:/NAME/VERSION`
  and `models:/NAME@ALIAS`: that version's own source, at most `MAX_HOPS` deep;
- `mlflow-artifacts:/PATH` (no host, or the tracking server's own);
- `s3://BUCKET/KEY` below the service's `--data-root s3://BUCKET/PREFIX`.

Anything else is `Refused`, with the reason the version's tags then carry:
`file://` and plain paths, another host, another bucket or a key outside the
prefix, a path with an empty, `.` or `..` segment (outside the version's
artifacts). In the folder, the model is the file the `MLmodel`'s
onnx flavour names (`service.registry.mlmodel`), else the models are every
`.onnx` file of it (a Hugging Face Optimum export: an encoder, a decoder, a
decoder with past), at most `MAX_MODEL_FILES`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from service.registry.folders import ArtifactFolder, BucketFolder, ProxyFolder
from service.registry.mlflow_api import MlflowApi
from service.registry.mlmodel import MlmodelError, onnx_model_path
from service.settings.kinds import s3_location

if TYPE_CHECKING:
    from service.store.data_root import DataRoot

MAX_HOPS = 3  # models:/NAME/VERSION sources followed to another version's
MAX_MODEL_FILES = 16  # .onnx files of one version, each imported and checked


class Refused(Exception):
    """The version's files are not fetched: the reason (for its tags)."""


def confined(path: str, what: str) -> str:
    """`path` as segments that stay inside the folder they start from; else Refused."""
    decoded = unquote(path)
    segments = decoded.split("/")
    bad = [segment for segment in segments if segment in ("", ".", "..") or "\\" in segment or "\0" in segment]
    if bad or (decoded != path and "%" in decoded):
        raise Refused(f"{what} {path[:200]!r} leaves the version's artifacts (an empty, '.' or '..' segment, or an encoded one)")
    return decoded


def _folder(uri: str, api: MlflowApi, data_root: DataRoot | None, what: str) -> ArtifactFolder:
    """The folder of an artifact URI: MLflow's artifact proxy, or the data root's bucket; else Refused."""
    parts = urlsplit(uri)
    if parts.scheme == "mlflow-artifacts":
        if parts.netloc and parts.netloc != urlsplit(api.base_url).netloc:
            raise Refused(f"{what} {uri[:200]!r} names another host than the tracking server ({parts.netloc[:100]})")
        return ProxyFolder(api, confined(parts.path.strip("/"), what))
    if parts.scheme == "s3":
        root = s3_location(data_root.url) if data_root is not None else None
        key = parts.path.strip("/")
        if data_root is None or root is None or parts.netloc != root[0] or (root[1] and not key.startswith(root[1].rstrip("/") + "/")):
            raise Refused(
                f"{what} {uri[:200]!r} is in S3 outside the service's bucket: S3 artifacts are read only below --data-root "
                "s3://BUCKET/PREFIX, anything else only through MLflow's artifact proxy"
            )
        return BucketFolder(data_root, confined(key[len(root[1].rstrip("/")) + 1 :] if root[1] else key, what))
    if parts.scheme in ("", "file"):
        raise Refused(f"{what} {uri[:200]!r} is a local path: the service fetches only through MLflow's artifact proxy")
    raise Refused(f"{what} {uri[:200]!r}: the scheme {parts.scheme[:20]!r} is not fetched (only mlflow-artifacts, through MLflow)")


def folder_below(folder: ArtifactFolder, path: str) -> ArtifactFolder:
    """The folder at `path` (confined already) below `folder`."""
    if isinstance(folder, ProxyFolder):
        return ProxyFolder(folder.api, f"{folder.path}/{path}")
    assert isinstance(folder, BucketFolder)
    return BucketFolder(folder.root, f"{folder.key}/{path}")


async def artifact_folder(api: MlflowApi, version: dict[str, Any], data_root: DataRoot | None = None, hops: int = 0) -> ArtifactFolder:
    """The folder holding the version's model (`data_root`: the service's, whose bucket, when it is one, S3 artifacts may be read from)."""
    source = str(version.get("source", ""))
    parts = urlsplit(source)
    if parts.scheme == "runs":
        if parts.netloc:
            raise Refused(f"the source {source[:200]!r} names another tracking server")
        run_id, _, below = parts.path.lstrip("/").partition("/")
        if not run_id:
            raise Refused(f"the source {source[:200]!r} names no run")
        base = _folder(await api.run_artifact_uri(run_id), api, data_root, f"run {run_id[:64]}'s artifact location")
        return folder_below(base, confined(below, "the source's path")) if below else base
    if parts.scheme == "models":
        if parts.netloc:
            raise Refused(f"the source {source[:200]!r} names another registry")
        body = parts.path.lstrip("/")
        if "/" not in body and "@" not in body:  # a logged model's id
            uri = await api.logged_model_artifact_uri(body)
            return _folder(uri, api, data_root, f"logged model {body[:64]}'s artifact location")
        if hops >= MAX_HOPS:
            raise Refused(f"the source {source[:200]!r} leads through more than {MAX_HOPS} model versions")
        if "@" in body:
            name, _, alias = body.rpartition("@")
            other = await api.version_by_alias(name, alias)
        else:
            name, _, number = body.rpartition("/")
            other = await api.model_version(name, number)
        return await artifact_folder(api, other, data_root, hops + 1)
    return _folder(source, api, data_root, "the source")


def model_files(mlmodel_text: str | None, listing: list[dict[str, Any]]) -> list[str]:
    """The models' paths below the folder: the one the MLmodel's onnx flavour names, else
    every .onnx file of the folder, in name order (at most `MAX_MODEL_FILES`)."""
    if mlmodel_text is not None:
        try:
            named = onnx_model_path(mlmodel_text)
        except MlmodelError as error:
            raise Refused(f"the version's MLmodel: {error}") from None
        if named is not None:
            return [confined(named, "the MLmodel's onnx model path")]
    models = sorted(str(entry.get("path", "")).rpartition("/")[2] for entry in listing
                    if not entry.get("is_dir") and str(entry.get("path", "")).endswith(".onnx"))  # fmt: skip
    if not models:
        raise Refused("the version's artifacts hold no onnx flavour in an MLmodel and no .onnx file")
    if len(models) > MAX_MODEL_FILES:
        raise Refused(
            f"the version's artifacts hold {len(models)} .onnx files ({', '.join(name[:100] for name in models[:5])}, ...) and no onnx "
            f"flavour in an MLmodel: at most {MAX_MODEL_FILES} are checked in one version"
        )
    return [confined(name, "an .onnx file's name") for name in models]
