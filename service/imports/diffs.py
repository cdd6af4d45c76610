"""The comparison of two stored models a tenant may read: `Diffs.compare`, and `Compared` to page through.

Each model's graph document (rendered for this tenant on its first request,
as `GET /models/{id}/graph` does: `service.imports.graph_render`) is compared in a
sandboxed worker (task "diff", `service.tasks.compare`), never parsed
in a front end: the worker's limits bound its memory and CPU, and it runs
in an import place of the tenant's, fair to the others
(`service.imports.admission`). Its answer (the head, the changes a JSON
object a line, their index) is kept in a folder of the tenant's under the
service's local root, and a page of changes is read from it by offsets,
parsed nowhere: at most `KEPT_PER_TENANT` comparisons a tenant, the least
recently asked removed first (a page after the first is not a second
comparison, and no tenant's timing tells whether another compared the same
models). A tenant runs one comparison at a time, in all the service's
front ends (a lock file of its own; the others wait their turn), and the
same comparison asked again while it runs waits for that one. Graph
documents larger than MAX_DIFF_GRAPH_BYTES together are refused
(`DiffTooLarge`, 422).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import json
import os
import shutil
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread

from service.errors import MODEL_GONE, DiffTooLarge, NotFound
from service.imports.admission import tenant_key
from service.imports.graph_render import graph_document
from service.imports.parts import ImportParts
from service.imports.workers import run_worker
from service.sandbox.protocol import DIFF_STREAMS, DiffInputs

MAX_DIFF_GRAPH_BYTES = 256 << 20  # both graph documents together
KEPT_PER_TENANT = 16
LOCK_POLL_SECONDS = 0.05
_INDEX = struct.Struct("<Q")
_FILES = tuple(f"{stream}.{'json' if stream == 'head' else 'jsonl' if stream == 'changes' else 'bin'}" for stream in DIFF_STREAMS)


@dataclass(frozen=True)
class Compared:
    """A comparison kept on disk: its head, and its changes read a page at a time."""

    folder: Path
    head: dict[str, Any]

    @property
    def count(self) -> int:
        return os.stat(self.folder / _FILES[2]).st_size // _INDEX.size - 1

    def page(self, first: int, count: int) -> list[bytes]:
        """The JSON text of changes `first` to `first + count - 1` (fewer at the end)."""
        last = min(first + count, self.count)
        if first >= last:
            return []
        with open(self.folder / _FILES[2], "rb") as index:
            index.seek(first * _INDEX.size)
            offsets = [_INDEX.unpack_from(entry)[0] for entry in _entries(index.read((last - first + 1) * _INDEX.size))]
        with open(self.folder / _FILES[1], "rb") as changes:
            changes.seek(offsets[0])
            text = changes.read(offsets[-1] - offsets[0])
        return [text[start - offsets[0] : end - offsets[0] - 1] for start, end in itertools.pairwise(offsets)]


def _entries(data: bytes) -> list[bytes]:
    return [data[at : at + _INDEX.size] for at in range(0, len(data), _INDEX.size)]


class Diffs:
    """The comparisons of this service's tenants (see the module comment)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.under_way: dict[tuple[str, str, str], asyncio.Future[Compared]] = {}

    async def compare(self, parts: ImportParts, tenant: str, a: str, b: str) -> Compared:
        """The comparison of model `a` (before) with model `b` (after), both readable by `tenant`."""
        key = (tenant, a, b)
        running = self.under_way.get(key)
        if running is None:
            running = asyncio.ensure_future(self._compared(parts, tenant, a, b))
            self.under_way[key] = running
            running.add_done_callback(lambda _: self.under_way.pop(key, None))
        return await asyncio.shield(running)

    async def _compared(self, parts: ImportParts, tenant: str, a: str, b: str) -> Compared:
        folder = self.folder / tenant_key(tenant) / f"{a}-{b}"
        async with self._turn(tenant):
            found = await anyio.to_thread.run_sync(_kept, folder)
            if found is None:
                await self._run(parts, tenant, a, b, folder)
                found = await anyio.to_thread.run_sync(_kept, folder)
                assert found is not None
                await anyio.to_thread.run_sync(_prune, folder.parent, KEPT_PER_TENANT)
        return found

    @contextlib.asynccontextmanager
    async def _turn(self, tenant: str) -> AsyncIterator[None]:
        """The tenant's one comparison at a time, in every front end (an open-file-description lock)."""
        folder = self.folder / tenant_key(tenant)
        await anyio.to_thread.run_sync(lambda: folder.mkdir(parents=True, exist_ok=True))
        fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            while True:
                try:
                    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi0q", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0))
                    break
                except BlockingIOError:
                    await asyncio.sleep(LOCK_POLL_SECONDS)
            yield
        finally:
            os.close(fd)  # the lock goes with the description

    async def _run(self, parts: ImportParts, tenant: str, a: str, b: str, folder: Path) -> None:
        """Compare in a worker, in an import place of the tenant's; the answer kept in `folder`."""
        opsets_a = await parts.read(lambda: _opsets(parts, a))
        opsets_b = await parts.read(lambda: _opsets(parts, b))
        with parts.store.work_folder() as area:
            documents = [area.root / "a.json", area.root / "b.json"]
            for model_id, target in zip((a, b), documents, strict=True):
                fd = await graph_document(parts, model_id, tenant)  # rendered first, each in a place of its own
                await anyio.to_thread.run_sync(_copied, fd, target)
            size = sum(path.stat().st_size for path in documents)
            if size > MAX_DIFF_GRAPH_BYTES:
                raise DiffTooLarge(f"the two graph documents hold {size} bytes; at most {MAX_DIFF_GRAPH_BYTES} are compared")
            inputs = DiffInputs(documents[1].name, a, b, opsets_a, opsets_b)
            job = parts.sandbox.job("diff", directory=str(area.root), model=documents[0].name, display_name=f"{a} -> {b}", diff=inputs)
            answers = [area.root / name for name in _FILES]
            async with parts.admission.admitted(tenant) as place:
                await run_worker(parts, place, job, answers, MAX_DIFF_GRAPH_BYTES * 4)
            await anyio.to_thread.run_sync(_keep, answers, folder)


def _copied(fd: int, target: Path) -> None:
    """The open graph document's bytes at `target`; the descriptor closed."""
    with os.fdopen(fd, "rb") as source, open(target, "wb") as out:
        shutil.copyfileobj(source, out, 1 << 20)


def _keep(answers: list[Path], folder: Path) -> None:
    """The worker's answer kept as `folder` (whole, or not at all)."""
    staging = folder.with_name(folder.name + f".{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for answer in answers:
        if answer.exists():
            os.replace(answer, staging / answer.name)
        else:
            (staging / answer.name).touch()  # an empty stream: the worker sends no file
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(staging, folder)


def _kept(folder: Path) -> Compared | None:
    """The comparison kept in `folder` (marked used), or None."""
    try:
        head = json.loads((folder / _FILES[0]).read_bytes())
    except FileNotFoundError:
        return None
    os.utime(folder)
    return Compared(folder, head)


def _prune(tenant_folder: Path, kept: int) -> None:
    """At most `kept` comparisons in the tenant's folder: the least recently used go."""
    found = sorted((entry.stat().st_mtime_ns, entry.path) for entry in os.scandir(tenant_folder) if entry.is_dir())
    for _, path in found[: max(0, len(found) - kept)]:
        shutil.rmtree(path, ignore_errors=True)


def _opsets(parts: ImportParts, model_id: str) -> tuple[tuple[str, int], ...]:
    """The model's opsets, from its stored summary."""
    try:
        found = json.loads(parts.store.summary(model_id)).get("opsets", [])
    except FileNotFoundError:
        raise NotFound(MODEL_GONE) from None
    return tuple((str(item["domain"]), int(item["version"])) for item in found if isinstance(item, dict)) if isinstance(found, list) else ()
