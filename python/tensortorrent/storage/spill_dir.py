"""This process's spill directory: where the data plane writes a call's spilled activations.

The root is CompileConfig.spill_dir, else TT_SPILL_DIR, else the cache directory
(hardware.budgets.spill_root); a root in RAM (tmpfs, ramfs) is refused unless
CompileConfig.allow_tmpfs_spill, since spilling there saves no RAM. Each process spills
under `<root>/spill/<pid>-<start time>`. The data plane's spill files there are anonymous
(O_TMPFILE: no name in the directory, gone when closed or when the process dies) and are
emptied after every call, also one that failed or was cancelled, so no spilled byte
outlives its call. The folder itself goes when the process exits, and a folder whose
process is gone (it was killed) is removed by the next process that spills under the root.
"""

from __future__ import annotations

import atexit
import os
import shutil
import threading

from .. import core
from ..config import CompileConfig
from ..errors import ConfigValueError
from ..files import nearest_existing
from ..hardware.budgets import spill_root

SPILL_SUBDIRECTORY = "spill"

_made: set[str] = set()  # this process's spill folders, removed at exit
_lock = threading.Lock()


def process_spill_dir(config: CompileConfig) -> str:
    """This process's spill folder under config's root, created (and the folders of dead
    processes there removed) on first use. Raises ConfigValueError for a root in RAM
    without allow_tmpfs_spill, OSError when the folder cannot be created."""
    root = os.path.abspath(spill_root(config.spill_dir))
    if core.probe_disk(nearest_existing(root)).in_memory and not config.allow_tmpfs_spill:
        raise ConfigValueError(
            f"spill directory {root} is on a filesystem held in RAM (tmpfs or ramfs): spilling there "
            "saves no RAM; set CompileConfig.spill_dir or TT_SPILL_DIR to a folder on a disk, or "
            "CompileConfig(allow_tmpfs_spill=True) to spill there all the same"
        )
    parent = os.path.join(root, SPILL_SUBDIRECTORY)
    mine = os.path.join(parent, _process_name(os.getpid()))
    with _lock:
        if mine not in _made:
            remove_dead_process_dirs(parent)
            os.makedirs(mine, exist_ok=True)
            if not _made:
                atexit.register(_remove_own)
            _made.add(mine)
    return mine


def spill_dir_for(plan, config: CompileConfig) -> str:
    """The spill folder a lowered plan's data plane needs: "" when the plan spills nothing."""
    return process_spill_dir(config) if plan.spilled_bytes else ""


def remove_dead_process_dirs(parent: str) -> list[str]:
    """Removes the spill folders under `parent` whose process has exited; returns them.
    Folders not named as this module names them are left alone."""
    removed = []
    for name in sorted(os.listdir(parent)) if os.path.isdir(parent) else []:
        pid, _, _ = name.partition("-")
        if not pid.isdigit() or _process_name(int(pid)) == name:
            continue  # not ours, or its process still runs
        shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        removed.append(name)
    return removed


def _process_name(pid: int) -> str:
    """`<pid>-<start time>`: the start time (clock ticks since boot) tells a live process from
    a later one that reuses a dead one's pid; "" when no such process runs."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rpartition(")")[2].split()
    except OSError:
        return ""
    return f"{pid}-{fields[19]}"  # field 22 of stat(5), counted after the command name


def _remove_own() -> None:
    for folder in _made:
        shutil.rmtree(folder, ignore_errors=True)
