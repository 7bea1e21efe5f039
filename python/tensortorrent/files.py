"""File writing that never leaves a half-written file behind; cold reads for measurements."""

from __future__ import annotations

import os
import tempfile

from .errors import StorageIOError


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
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}-", suffix=".tmp", dir=directory)
    except OSError as error:
        raise _write_error(path, what, error) from error
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp's 0600 would hide it from other users
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException as error:
        os.unlink(tmp)
        if isinstance(error, OSError):
            raise _write_error(path, what, error) from error
        raise
    return path


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
    process maps stay."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
