"""Server-side path confinement: a client-named path under the data root.

Owns `check_relative_path` (the lexical rules of docs/import-rules.md §5, rule 1, also
applied to every percent-decoded form of the path, so `%2e%2e/x` is refused
like `../x`) and `resolve_under_root` (every link resolved; the result must
lie inside the resolved root and be a regular file). Lexical refusals are
400 (`path-refused`), a path that resolves outside the root or to a
non-regular file (directory, FIFO, device, socket) is 403
(`path-forbidden`), a missing file 404. It opens nothing: the worker opens the
file and checks it is the one resolved here (device and inode).

Also `open_under`, which opens a recorded path below the data root (or a
model's store folder) one component at a time, following no link, and
`open_checked`, which also checks the file is the very one read at import
(same size, mtime_ns and inode), for serving tensor bytes long after the import.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from urllib.parse import unquote

from importer.external_data import location_refusal
from service.errors import NotFound, PathForbidden, PathRefused, TensorSourceChanged, TensorSourceGone, bounded
from service.store.records import SourceFile

MAX_PATH_CHARS = 4096
MAX_DECODING_ROUNDS = 4


def lexical_refusal(path: str) -> str | None:
    """Why `path` breaks the rules of section 5 step 1 (the importer's own
    check, `location_refusal`), or None."""
    reason = location_refusal(path)
    if reason is None and os.path.isabs(path):
        reason = "is not relative"
    return None if reason is None else f"the path {reason}"


def check_relative_path(path: str) -> str:
    """`path` if it and its percent-decoded forms are relative and confined."""
    if len(path) > MAX_PATH_CHARS:
        raise PathRefused(f"the path is longer than {MAX_PATH_CHARS} characters")
    form = path
    for _ in range(MAX_DECODING_ROUNDS):
        reason = lexical_refusal(form)
        if reason is not None:
            encoded = "" if form == path else " (after percent-decoding)"
            raise PathRefused(f"{reason}{encoded}: {bounded(repr(path), 200)}")
        decoded = unquote(form, errors="replace") if "%" in form else form
        if decoded == form:
            break
        form = decoded
    return path


@dataclass(frozen=True, slots=True)
class ResolvedPath:
    real_path: str  # absolute, every link resolved
    relative: str  # as the client named it
    size: int
    mtime_ns: int
    inode: int
    device: int


def resolve_under_root(root: str, path: str) -> ResolvedPath:
    """Resolve client path `path` under `root`; see the module comment."""
    check_relative_path(path)
    real_root = os.path.realpath(root)
    real_path = os.path.realpath(os.path.join(real_root, path))
    if relative_below(real_root, real_path) is None:
        raise PathForbidden(f"the path resolves outside the data root: {bounded(repr(path), 200)}")
    try:
        info = os.stat(real_path)
    except FileNotFoundError:
        raise NotFound(f"no such file under the data root: {bounded(repr(path), 200)}") from None
    except OSError as error:
        raise PathForbidden(f"the path cannot be examined ({error.strerror}): {bounded(repr(path), 200)}") from None
    if not stat.S_ISREG(info.st_mode):
        raise PathForbidden(f"not a regular file: {bounded(repr(path), 200)}")
    return ResolvedPath(real_path, path, info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev)


class PathChanged(Exception):
    """A recorded relative path no longer leads to a regular file without links."""


def open_under(root: str, relative: str) -> int:
    """Open `relative` (as recorded at import: no links in it) below the
    directory `root`, one component at a time relative to its parent's
    descriptor, none of them followed if it is a symbolic link; the file is
    opened read-only without blocking. A component swapped for a link, or a
    missing one, raises `PathChanged` (or FileNotFoundError when it is gone);
    the caller checks the opened file's identity."""
    parts = relative.split("/")
    if not relative or os.path.isabs(relative) or any(part in ("", ".", "..") for part in parts):
        raise PathChanged(f"not a recorded relative path: {relative!r}")
    directory = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
            except FileNotFoundError:
                raise
            except OSError as error:  # ELOOP (a link), ENOTDIR (no longer a folder)
                raise PathChanged(f"{part!r} is no longer a folder ({error.strerror})") from None
            os.close(directory)
            directory = inner
        try:
            return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory)
        except FileNotFoundError:
            raise
        except OSError as error:
            raise PathChanged(f"the file cannot be opened without following a link ({error.strerror})") from None
    finally:
        os.close(directory)


def open_checked(root: str, identity: SourceFile) -> int:
    """Open the file a tensor lives in (`identity.path`, below `root`, no link
    followed on the way), checking it is the one read at import."""
    try:
        fd = open_under(root, identity.path)
    except FileNotFoundError:
        raise TensorSourceGone("the file holding the tensor no longer exists; import the model again") from None
    except PathChanged as error:
        raise TensorSourceChanged(f"the path of the file holding the tensor changed since the import: {error}") from None
    except OSError as error:
        raise TensorSourceChanged(f"the file holding the tensor cannot be opened ({error.strerror})") from None
    try:
        info = os.fstat(fd)
        # size, mtime and inode, not the device number: on a shared network
        # store each node numbers the mount its own way (see deploy/README.md)
        seen = (identity.size, identity.mtime_ns, identity.inode)
        now = (info.st_size, info.st_mtime_ns, info.st_ino)
        if not stat.S_ISREG(info.st_mode) or now != seen:
            raise TensorSourceChanged("the file holding the tensor changed since the import; import the model again")
    except BaseException:
        os.close(fd)
        raise
    return fd


def relative_below(root: str, path: str) -> str | None:
    """`path` (absolute, links resolved) relative to `root` (likewise), or None
    if it is not inside it. Lexical: it looks at no file."""
    real_root = os.path.normpath(root)
    normal = os.path.normpath(path)
    if normal == real_root or os.path.commonpath([real_root, normal]) != real_root:
        return None
    return os.path.relpath(normal, real_root).replace(os.sep, "/")
