"""Freed heap memory kept for the next call instead of being faulted in again.

glibc's malloc adapts two thresholds to what the process freed before: whether a call's
activations come back from its heap or are given back to the OS and faulted in again,
page by page, on the next call depends on that history. A GPT-2 forward here took
6,000 page faults per call (its 26 MB of logits, about 8% of its time) in one process
and none in another. A compiled module therefore asks the core to keep freed memory
mapped while it stays under twice what one call's values take (runtime/program_runner.py's
planned sizes), within a cap; the retention is process-wide and only ever raised (the
core's retain_freed_heap, which leaves thresholds the process set itself). Memory is
kept only where a call had it live, so no budget is exceeded. TT_HEAP_RETENTION=0 leaves
glibc's thresholds alone.
"""

from __future__ import annotations

import logging
import os

from .. import core
from ..units import format_bytes
from .program_runner import ProgramRunner

log = logging.getLogger(__name__)

# Beyond this, a call's values take far longer to compute than to fault in.
MAX_RETAINED_BYTES = 1 << 30


def retain_heap_for(runner: ProgramRunner) -> None:
    """Keeps freed heap memory for `runner`'s calls (see the module's docstring)."""
    if os.environ.get("TT_HEAP_RETENTION", "1") == "0":
        return
    values = sum(runner.slot_bytes[runner.bound_count :])
    before = core.heap_retention()
    now = core.retain_freed_heap(min(MAX_RETAINED_BYTES, 2 * values))
    if now.trim_bytes != before.trim_bytes:
        log.info(
            "freed heap memory kept for reuse up to %s (blocks under %s come from the heap)",
            format_bytes(now.trim_bytes),
            format_bytes(now.mmap_threshold),
        )
