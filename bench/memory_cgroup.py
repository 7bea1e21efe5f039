"""A memory cgroup for one benchmark process, so that a RAM budget holds for page cache too.

A RAM budget given to a library (Accelerate's max_memory, TensorTorrent's ram_budget_bytes)
limits the weights it keeps; the files it reads still fill the machine's page cache, and on a
machine with RAM to spare a second pass over offloaded weights comes from memory, not disk.
A container's memory limit counts that page cache: in a cgroup of the budget's size, the
kernel evicts it as it would there. Needs root and the memory controller (cgroup v1's
memory hierarchy or v2's unified one); elsewhere `memory_cgroup` yields None and the run
goes on without a limit, which its results say.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

V1 = Path("/sys/fs/cgroup/memory")
V2 = Path("/sys/fs/cgroup")


def _version() -> int | None:
    """Which cgroup version offers the memory controller here, if any."""
    if (V1 / "memory.limit_in_bytes").exists():
        return 1
    controllers = V2 / "cgroup.controllers"
    if controllers.exists() and "memory" in controllers.read_text().split():
        return 2
    return None


@contextlib.contextmanager
def memory_cgroup(name: str) -> Iterator[Path | None]:
    """A new memory cgroup, not limited yet, removed on exit once its processes have ended;
    None where this machine gives none."""
    version = _version()
    if version is None or os.geteuid() != 0:
        yield None
        return
    group = (V1 if version == 1 else V2) / f"tt-bench-{os.getpid()}-{name}"
    try:
        group.mkdir()
    except OSError:  # a read-only or delegated hierarchy
        yield None
        return
    try:
        yield group
    finally:
        for _ in range(50):  # a process just reaped may keep the group busy a moment
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def join(group: Path) -> None:
    """Moves this process into `group`; what it allocates and reads from now on counts there."""
    (group / "cgroup.procs").write_text(str(os.getpid()))


def limit(group: Path, limit_bytes: int) -> None:
    """Limits `group` to `limit_bytes`, page cache included (the kernel reclaims the cache
    above it first), and restarts its peak from now. Raises OSError where what its
    processes hold cannot be brought under the limit."""
    if (group / "memory.limit_in_bytes").exists():
        (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
        (group / "memory.max_usage_in_bytes").write_text("0")
    else:
        (group / "memory.max").write_text(str(limit_bytes))


def anonymous_bytes(group: Path) -> int:
    """The anonymous memory (heaps, arenas: not page cache) the group's processes hold now."""
    stat = dict(line.split() for line in (group / "memory.stat").read_text().splitlines())
    return int(stat["rss"] if "rss" in stat else stat["anon"])


def peak_bytes(group: Path) -> int | None:
    """The most memory the group held at once since `limit` (cgroup v1; None on v2, whose
    peak cannot be restarted for another reader)."""
    try:
        return int((group / "memory.max_usage_in_bytes").read_text())
    except (OSError, ValueError):
        return None
