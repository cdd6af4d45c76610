"""Where a model version's files are, asked of MLflow only: `artifact_folder`, `model_file`.

The payload's `source` is never fetched: the gate asks MLflow for the
version, and resolves the `source` MLflow holds to a folder of its artifact
proxy (`/api/2.0/mlflow-artifacts/artifacts/...`):

- `runs:/RUN/PATH`: the run's artifact URI (asked of MLflow), then PATH below it;
- `models:/m-ID` (a logged model): its artifact URI; `models:/NAME/VERSION`
  and `models:/NAME@ALIAS`: that version's own source, at most `MAX_HOPS` deep;
- `mlflow-artifacts:/PATH` (no host, or the tracking server's own).

Anything else is `Refused`, with the reason the version's tags then carry:
`file://` and plain paths, another host, `s3://` (no bucket of the service
holds MLflow's artifacts), a path with an empty, `.` or `..` segment (outside
the version's artifacts). In the folder, the model is the file the `MLmodel`'s
onnx flavour names (`service.registry.mlmodel`), else its one `.onnx` file.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from service.registry.mlflow_api import MlflowApi
from service.registry.mlmodel import MlmodelError, onnx_model_path

MAX_HOPS = 3  # models:/NAME/VERSION sources followed to another version's


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


def _proxy_path(uri: str, server: str, what: str) -> str:
    """The artifact proxy's path of an artifact URI; Refused unless it is mlflow-artifacts on this server."""
    parts = urlsplit(uri)
    if parts.scheme == "mlflow-artifacts":
        if parts.netloc and parts.netloc != urlsplit(server).netloc:
            raise Refused(f"{what} {uri[:200]!r} names another host than the tracking server ({parts.netloc[:100]})")
        return confined(parts.path.strip("/"), what)
    if parts.scheme == "s3":
        raise Refused(f"{what} {uri[:200]!r} is in S3: the service fetches no bucket for MLflow (only through its artifact proxy)")
    if parts.scheme in ("", "file"):
        raise Refused(f"{what} {uri[:200]!r} is a local path: the service fetches only through MLflow's artifact proxy")
    raise Refused(f"{what} {uri[:200]!r}: the scheme {parts.scheme[:20]!r} is not fetched (only mlflow-artifacts, through MLflow)")


async def artifact_folder(api: MlflowApi, version: dict[str, Any], hops: int = 0) -> str:
    """The artifact proxy's folder holding the version's model."""
    source = str(version.get("source", ""))
    parts = urlsplit(source)
    if parts.scheme == "runs":
        if parts.netloc:
            raise Refused(f"the source {source[:200]!r} names another tracking server")
        run_id, _, below = parts.path.lstrip("/").partition("/")
        if not run_id:
            raise Refused(f"the source {source[:200]!r} names no run")
        base = _proxy_path(await api.run_artifact_uri(run_id), api.base_url, f"run {run_id[:64]}'s artifact location")
        return base + "/" + confined(below, "the source's path") if below else base
    if parts.scheme == "models":
        if parts.netloc:
            raise Refused(f"the source {source[:200]!r} names another registry")
        body = parts.path.lstrip("/")
        if "/" not in body and "@" not in body:  # a logged model's id
            uri = await api.logged_model_artifact_uri(body)
            return _proxy_path(uri, api.base_url, f"logged model {body[:64]}'s artifact location")
        if hops >= MAX_HOPS:
            raise Refused(f"the source {source[:200]!r} leads through more than {MAX_HOPS} model versions")
        if "@" in body:
            name, _, alias = body.rpartition("@")
            other = await api.version_by_alias(name, alias)
        else:
            name, _, number = body.rpartition("/")
            other = await api.model_version(name, number)
        return await artifact_folder(api, other, hops + 1)
    return _proxy_path(source, api.base_url, "the source")


def model_file(mlmodel_text: str | None, listing: list[dict[str, Any]]) -> str:
    """The model's path below `folder`: the MLmodel's onnx flavour, else the folder's one .onnx file."""
    if mlmodel_text is not None:
        try:
            named = onnx_model_path(mlmodel_text)
        except MlmodelError as error:
            raise Refused(f"the version's MLmodel: {error}") from None
        if named is not None:
            return confined(named, "the MLmodel's onnx model path")
    models = sorted(str(entry.get("path", "")).rpartition("/")[2] for entry in listing
                    if not entry.get("is_dir") and str(entry.get("path", "")).endswith(".onnx"))  # fmt: skip
    if len(models) != 1:
        found = "no .onnx file" if not models else f"{len(models)} .onnx files ({', '.join(models[:5])})"
        raise Refused(f"the version's artifacts hold no onnx flavour in an MLmodel and {found}")
    return models[0]
