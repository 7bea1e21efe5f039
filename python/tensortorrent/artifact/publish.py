"""Atomic, durable publishing of an artifact directory."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable

from .. import _core
from ..errors import ArtifactError, StorageIOError
from .layout import MANIFEST


def publish_directory(target: str, write: Callable[[str], None]) -> str:
    """Calls write(staging) to fill a fresh directory beside `target`, then swaps it in.

    Until the swap `target` keeps its previous contents; the swap is one atomic rename
    (an exchange when something is already there), so a crash or a kill at any moment
    leaves either the old or the new artifact, and concurrent savers leave exactly one
    complete artifact. Files and directories are fsynced before the swap and the parent
    after it, so a save that returned survives a power loss.
    """
    target = os.path.abspath(target)
    parent = os.path.dirname(target)
    _check_replaceable(target)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.saving-", dir=parent)
    try:
        write(staging)
        for name in os.listdir(staging):
            _fsync_path(os.path.join(staging, name))
        _fsync_path(staging)
        _swap_in(staging, target)
        _fsync_path(parent)
    finally:
        # After an exchange the staging path holds the previous artifact; before, a partial one.
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _check_replaceable(target: str) -> None:
    """Refuses to replace anything but an earlier artifact or an empty directory."""
    if os.path.islink(target):
        raise ArtifactError(f"{target}: is a symlink; refusing to save through it")
    if not os.path.lexists(target):
        return
    if not os.path.isdir(target):
        raise ArtifactError(f"{target}: exists and is not a directory; refusing to replace it")
    contents = os.listdir(target)
    if contents and MANIFEST not in contents:
        raise ArtifactError(f"{target}: exists and is not a TensorTorrent artifact; refusing to replace it")


def _swap_in(staging: str, target: str) -> None:
    for _ in range(3):  # another saver may create or swap `target` between our two tries
        try:
            os.rename(staging, target)  # atomic when nothing (or an empty directory) is there
            return
        except OSError:
            pass  # something is there: exchange with it
        try:
            _core.exchange_paths(staging, target)
            return
        except StorageIOError:
            continue  # it vanished again; rename once more
    raise ArtifactError(f"{target}: could not publish the artifact; another process keeps changing the path")


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
