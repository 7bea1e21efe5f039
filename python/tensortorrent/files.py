"""File writing that never leaves a half-written file behind; cold reads for measurements."""

from __future__ import annotations

import os
import tempfile


def write_text_atomically(path: str | os.PathLike, text: str) -> str:
    """Writes `text` to a temporary file beside `path`, then renames it into place.

    Missing parent directories are created first. A reader sees the old file or the whole
    new one, never a partial write; on any error the temporary file is removed and `path`
    is left as it was. Returns the path written.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


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
