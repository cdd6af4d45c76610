"""Progress of a transfer, reported as its bytes move.

Owns `Progress` (the callback a method's `progress=` takes: `(done_bytes,
total_bytes) -> None`, where `done_bytes` may go back when a retry starts a
body over or a resumed upload learns the server's offset, and `total_bytes`
is 0 when unknown), `reporting` (what `progress=` means: a callback as it
is, True for a bar on standard error, None or False for nothing; the bar
module, and so tqdm, is imported only when a bar is asked for) and
`CountingFile` (a file whose reads report how far every file of a multipart
body has been read: what the request has sent, give or take the socket's
buffer).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from pathlib import Path

Progress = Callable[[int, int], None]
ProgressOption = Progress | bool | None


@contextlib.contextmanager
def reporting(progress: ProgressOption, label: str) -> Iterator[Progress | None]:
    """The callback for `progress` (a bar labelled `label` for True, closed on
    the way out), or None when nothing is to be reported."""
    if progress is None or progress is False:
        yield None
        return
    if progress is True:
        from service.client.bar import TerminalBar

        bar = TerminalBar(label)
        try:
            yield bar
        finally:
            bar.close()
        return
    yield progress


class Tally:
    """Bytes read from a set of files, reported as their sum after each read."""

    def __init__(self, report: Progress, total: int) -> None:
        self.report = report
        self.total = total
        self.files: list[CountingFile] = []

    def open(self, path: Path) -> CountingFile:
        counted = CountingFile(path, self)
        self.files.append(counted)
        return counted

    def moved(self) -> None:
        self.report(sum(file.done for file in self.files), self.total)


class CountingFile(io.FileIO):
    """A file opened for reading whose every read tells its `Tally`. Its
    position is what counts, so a body sent again (httpx seeks each file back
    to 0 on a retry) starts its count over."""

    def __init__(self, path: Path, tally: Tally) -> None:
        super().__init__(path, "rb")
        self.tally = tally
        self.done = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.done = self.tell()
        self.tally.moved()
        return data or b""

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        position = super().seek(offset, whence)
        self.done = position
        return position
