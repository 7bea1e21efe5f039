"""File writing that never leaves a half-written file behind; cold reads for measurements."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator

from .errors import StorageIOError

log = logging.getLogger(__name__)
# Staging files and directories this process is writing (set operations are atomic).
_in_progress: set[str] = set()
# `.NAME.KIND-PID-...`: what a write of NAME makes beside it before the rename that publishes it.
LEFTOVER = re.compile(r"\.(?P<name>.+)\.(?P<kind>saving|old)-(?P<pid>\d+)-")


def write_text_atomically(path: str | os.PathLike, text: str, what: str = "") -> str:
    """Writes `text` to a temporary file beside `path`, then renames it into place.

    Missing parent directories are created first. A reader sees the old file or the whole
    new one, never a partial write; on any error the temporary file is removed and `path`
    is left as it was, and StorageIOError names `path` (after `what`, the caller's name).
    The file gets the permissions the umask gives a new file, as open() would. Returns
    the path written.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=leftover_prefix(path), suffix=".tmp", dir=directory)
    except OSError as error:
        raise _write_error(path, what, error) from error
    try:
        with writing(tmp):
            os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp's 0600 would hide it from other users
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(error, OSError):
            raise _write_error(path, what, error) from error
        raise
    return path


def leftover_prefix(path: str, kind: str = "saving") -> str:
    """The name, before a unique suffix, of what a write of `path` makes beside it: the new
    version being written ("saving") or the old one moved aside ("old"), with this
    process's id, by which a later write knows it for a leftover once the process is gone."""
    return f".{os.path.basename(path)}.{kind}-{os.getpid()}-"


@contextlib.contextmanager
def writing(staging: str) -> Iterator[str]:
    """Marks `staging` as this process's write in progress, which remove_leftovers keeps."""
    _in_progress.add(staging)
    try:
        yield staging
    finally:
        _in_progress.discard(staging)


def remove_leftovers(directory: str, name: str | None = None) -> None:
    """Removes the staging files and directories (see leftover_prefix) of writes of `name`
    (of any name when None) in `directory` that processes no longer running left there: a
    kill, or a removal that failed. A running process's are its write in progress, and stay."""
    try:
        entries = os.listdir(directory)
    except OSError as error:  # the write itself is done; the next one tries again
        log.warning("%s: could not look for leftovers of earlier writes (%s)", directory, error.strerror or error)
        return
    for entry in entries:
        match = LEFTOVER.match(entry)
        if not match or (name is not None and match["name"] != name):
            continue
        path = os.path.join(directory, entry)
        if _running(int(match["pid"]), path):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _running(pid: int, path: str) -> bool:
    """Whether the write that made `path` may still be running."""
    if pid == os.getpid():
        return path in _in_progress  # another thread's write, or over
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _write_error(path: str, what: str, error: OSError) -> StorageIOError:
    prefix = f"{what}: " if what else ""
    return StorageIOError(f"{prefix}cannot write {path!r}: {error.strerror or error}")


def current_umask() -> int:
    """The process's umask, read without changing it where Linux reports it (os.umask
    can only be read by setting it, a moment in which another thread could create a file)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def nearest_existing(path: str) -> str:
    """`path`, or its closest ancestor that exists (a folder not created yet)."""
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def drop_page_cache(path: str | os.PathLike) -> None:
    """Evicts the file's pages from the page cache, so that the next read of it comes from
    the device (dirty pages cannot be dropped: they are written back first). Pages that a
    process maps stay. StorageIOError when the disk fails."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    except OSError as error:
        raise StorageIOError(
            f"{os.fspath(path)}: cannot drop its pages from the page cache: {error.strerror or error}"
        ) from error
