"""Atheris target of the read-mode cache's reader (make fuzz): `<spill root>/read-modes.json`,
which every streaming compile and `tensortorrent doctor` read, and any process may have
left damaged.

Each input is the file's bytes. The reader must never raise, and every entry it gives back
must have the fields and types its readers use (a damaged one is left out, to be measured
again). Seeded from a real cache (fuzz/corpus/read_mode_cache/)."""

from __future__ import annotations

import os
import sys
import tempfile

import atheris
from instrumented import instrument_package

FOLDER = tempfile.mkdtemp(prefix="tt-read-modes-fuzz-")
os.environ["TT_SPILL_DIR"] = FOLDER  # before the import: the cache lives under the spill root

from tensortorrent.storage import read_mode_cache  # noqa: E402 - looked up at call time: instrumented


def read_cache(data: bytes) -> None:
    with open(read_mode_cache.cache_path(), "wb") as handle:
        handle.write(data)
    entries = read_mode_cache.cached_read_modes()
    for key, entry in entries.items():
        read_mode_cache.remembered(key)
        time_text = f"{entry['measured_at']:.0f} {entry['mode']} {entry['threads'] + entry['request_bytes']}"
        speed = f"{entry['measured_gbps'] or 0:.2f} {entry['reason']}"  # as tensortorrent doctor prints it
        assert time_text and speed


if __name__ == "__main__":
    os.makedirs(os.path.dirname(read_mode_cache.cache_path()), exist_ok=True)
    instrument_package()
    atheris.Setup(sys.argv, read_cache)
    atheris.Fuzz()
