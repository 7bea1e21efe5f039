"""How to read each disk, as a streaming compile measured it, remembered across processes.

Measuring takes seconds (every candidate mode and depth, several rounds), so the choice
is kept per device (its major:minor number) in `<spill root>/read-modes.json` for a week,
for this version of tensortorrent and this METHOD of measuring; `tensortorrent doctor`
lists it. A process that takes a remembered choice still reads once with it, for the
disk's speed of the moment (it drifts). TT_READ_MODE_CACHE=0 measures everything again in every process.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ..environment import env_flag
from ..files import write_text_atomically
from ..hardware.budgets import spill_root
from ..version import __version__

CACHE_FILE = "read-modes.json"
MAX_AGE_S = 7 * 24 * 3600
# How candidates are measured; an entry measured another way is measured again. 2: into a
# destination in huge pages, as the arenas streamed reads go to are (common/aligned_buffer.h):
# into scattered 4 KiB pages, deep queues measured slower than they stream.
METHOD = 2


def device_key(path: str) -> str:
    """The device a file lives on, as `major:minor`."""
    device = os.stat(path).st_dev
    return f"{os.major(device)}:{os.minor(device)}"


def cache_path() -> str:
    return os.path.join(spill_root(None), CACHE_FILE)


def remembered(key: str) -> dict[str, Any] | None:
    """The entry measured on device `key`, unless it is older than MAX_AGE_S, from another
    version or METHOD, or the cache is off."""
    if env_flag("TT_READ_MODE_CACHE") is False:
        return None
    entry = cached_read_modes().get(key)
    if not isinstance(entry, dict) or entry.get("tensortorrent") != __version__ or entry.get("method") != METHOD:
        return None
    fresh = time.time() - entry["measured_at"] < MAX_AGE_S
    return entry if fresh else None


def remember(key: str, entry: dict[str, Any]) -> None:
    """Records what was measured on device `key` (a failure to write is not an error: the
    next process measures again)."""
    if env_flag("TT_READ_MODE_CACHE") is False:
        return
    entries = cached_read_modes()
    entries[key] = entry | {"measured_at": time.time(), "tensortorrent": __version__, "method": METHOD}
    try:
        write_text_atomically(cache_path(), json.dumps(entries, indent=2) + "\n")
    except OSError:
        pass


# What an entry holds, by field: a damaged one (another type, a value out of range) is
# left out, so that a process measures that device again and overwrites it.
FIELDS = {
    "mode": lambda v: v in ("auto", "buffered", "direct"),
    "threads": lambda v: type(v) is int and 1 <= v <= 1024,
    "request_bytes": lambda v: type(v) is int and 1 <= v <= 1 << 40,
    "measured_gbps": lambda v: v is None or (type(v) in (int, float) and 0 <= v < 1e6),
    "reason": lambda v: isinstance(v, str),
    "measured_at": lambda v: type(v) in (int, float) and 0 <= v < 1e11,
}


def cached_read_modes() -> dict[str, Any]:
    """Every well-formed cached entry by device; {} when there is no readable cache."""
    try:
        with open(cache_path(), encoding="utf-8") as handle:
            entries = json.load(handle)
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(entries, dict):
        return {}
    return {key: entry for key, entry in entries.items() if _well_formed(entry)}


def _well_formed(entry: Any) -> bool:
    return isinstance(entry, dict) and all(field in entry and valid(entry[field]) for field, valid in FIELDS.items())
