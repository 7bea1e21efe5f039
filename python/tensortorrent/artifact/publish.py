"""Atomic, durable publishing of an artifact directory."""

from __future__ import annotations

import errno
import functools
import logging
import os
import shutil
import tempfile
from collections.abc import Callable

from .. import core
from ..errors import ArtifactError, IncompatibleError, StorageIOError, TensorTorrentError
from ..files import current_umask, leftover_prefix, remove_leftovers, writing
from .layout import MANIFEST

log = logging.getLogger(__name__)

# Another saver got there first: an artifact appeared (rename) or went away (exchange).
RENAME_RACES = (errno.EEXIST, errno.ENOTEMPTY, errno.EBUSY)
EXCHANGE_RACES = (errno.ENOENT, errno.EBUSY)
# The file system (or kernel) has no renameat2(RENAME_EXCHANGE).
EXCHANGE_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)


def publish_directory(target: str, write: Callable[[str], None], marker: str = MANIFEST) -> str:
    """Calls write(staging) to fill a fresh directory beside `target`, then swaps it in;
    what is there already is replaced only if it is empty or holds `marker` (an earlier
    artifact's manifest, or another kind of output's own file).

    Until the swap `target` keeps its previous contents; the swap is one atomic rename
    (an exchange when something is already there), so a crash or a kill at any moment
    leaves either the old or the new artifact, and concurrent savers leave exactly one
    complete artifact. Files and directories are fsynced before the swap and the parent
    after it, so a save that returned survives a power loss. On a file system that cannot
    exchange paths the swap is two renames instead (see _replace_aside): never a mix of
    the two artifacts, but a crash between them leaves the old one under a `.old-*` name.
    """
    target = os.path.abspath(target)
    parent = os.path.dirname(target)
    _check_replaceable(target, marker)
    try:
        os.makedirs(parent, exist_ok=True)  # as `mkdir -p` would
        staging = tempfile.mkdtemp(prefix=leftover_prefix(target), dir=parent)
    except OSError as error:
        raise ArtifactError(f"{target}: cannot write in {parent} ({error.strerror or error})") from error
    with writing(staging):
        return _fill_and_publish(staging, target, write)


def _fill_and_publish(staging: str, target: str, write: Callable[[str], None]) -> str:
    parent = os.path.dirname(target)
    published = False
    try:
        os.chmod(staging, 0o777 & ~current_umask())  # mkdtemp's 0700 would hide it from other users
        write(staging)
        for name in os.listdir(staging):
            _fsync_path(os.path.join(staging, name))
        _fsync_path(staging)
        _swap_in(staging, target)
        published = True
        _fsync_path(parent)
        remove_leftovers(parent, os.path.basename(target))
    except OSError as error:
        if isinstance(error, TensorTorrentError):
            raise
        # A full disk or a failing one, as the OS reported it: typed, and saying what is left.
        where = f" ({error.filename})" if error.filename else ""
        outcome = (
            "the new artifact is in place, but its folder could not be synced to disk"
            if published
            else "nothing was published; what was there is unchanged"
        )
        raise StorageIOError(f"{target}: saving failed: {error.strerror or error}{where}; {outcome}") from error
    finally:
        # After an exchange the staging path holds the previous artifact; before, a partial one.
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _check_replaceable(target: str, marker: str) -> None:
    """Refuses to replace anything but an earlier output (holding `marker`) or an empty directory."""
    if os.path.islink(target):
        raise ArtifactError(f"{target}: is a symlink; refusing to save through it")
    if not os.path.lexists(target):
        return
    if not os.path.isdir(target):
        raise ArtifactError(f"{target}: exists and is not a directory; refusing to replace it")
    contents = os.listdir(target)
    if contents and marker not in contents:
        what = "a TensorTorrent artifact" if marker == MANIFEST else f"an earlier output (no {marker})"
        raise ArtifactError(f"{target}: exists and is not {what}; refusing to replace it")


def _swap_in(staging: str, target: str) -> None:
    for _ in range(3):  # another saver may create or swap `target` between our two tries
        try:
            os.rename(staging, target)  # atomic when nothing (or an empty directory) is there
            return
        except OSError as error:
            if error.errno not in RENAME_RACES:
                raise _publish_error(target, error.strerror or str(error)) from error
        try:  # an artifact is there: exchange with it
            core.exchange_paths(staging, target)
            return
        except IncompatibleError:  # the native side's EINVAL/ENOSYS, or not Linux
            _replace_aside(staging, target)
            return
        except StorageIOError as error:
            code = _native_errno(error)
            if code in EXCHANGE_UNSUPPORTED:
                _replace_aside(staging, target)
                return
            if code not in EXCHANGE_RACES:
                raise _publish_error(target, str(error)) from error
    raise ArtifactError(f"{target}: could not publish the artifact; another process keeps changing the path")


def _native_errno(error: StorageIOError) -> int | None:
    """The OS error behind a native IO error, which carries it only as strerror text."""
    message = str(error)
    codes = (*EXCHANGE_UNSUPPORTED, *EXCHANGE_RACES)
    return next((code for code in codes if message.endswith(os.strerror(code))), None)


def _publish_error(target: str, reason: str) -> ArtifactError:
    return ArtifactError(f"{target}: could not publish the artifact ({reason})")


def _replace_aside(staging: str, target: str) -> None:
    """Replaces `target` without an atomic exchange: the old artifact is renamed aside, the
    new one renamed in, then the old removed; if the new one cannot go in, the old goes back.
    A crash in between leaves the old artifact complete under its `.old-*` name."""
    _note_no_exchange(os.path.dirname(target))
    # An empty directory of a unique name: renaming a directory onto an empty one replaces it.
    aside = tempfile.mkdtemp(prefix=leftover_prefix(target, "old"), dir=os.path.dirname(target))
    with writing(aside):
        _move_aside_and_in(staging, target, aside)


def _move_aside_and_in(staging: str, target: str, aside: str) -> None:
    try:
        os.rename(target, aside)
    except OSError as error:
        os.rmdir(aside)
        raise _publish_error(target, f"moving the previous artifact aside: {error.strerror or error}") from error
    try:
        os.rename(staging, target)
    except OSError as error:
        try:
            os.rename(aside, target)
        except OSError:  # another saver's complete artifact is there now; ours and the old go
            shutil.rmtree(aside, ignore_errors=True)
        raise _publish_error(target, f"renaming the new artifact in: {error.strerror or error}") from error
    shutil.rmtree(aside, ignore_errors=True)


@functools.cache
def _note_no_exchange(directory: str) -> None:
    log.info(
        "%s: the file system cannot exchange two paths atomically (renameat2 RENAME_EXCHANGE); "
        "artifacts here are replaced by renaming the old one aside first",
        directory,
    )


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
