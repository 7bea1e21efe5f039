"""Timing two ways of computing the same thing, interleaved, to keep the faster one."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

TIMED_SAMPLES = 6  # interleaved samples of each: as often first as second
LEAST_SAMPLES = 3  # ... but no fewer, however slow the calls
SAMPLE_S = 0.002  # each sample repeats a call for at least this long
COMPARISON_S = 0.3  # a comparison of slow calls takes fewer samples to stay near this


def time_side_by_side(
    first: Callable[[], Any], second: Callable[[], Any], sync: Callable[[], Any] | None = None
) -> tuple[float, float]:
    """Median seconds per call of each, timed interleaved after two warm-up calls of each
    (a kernel's first call may set up its primitives), the order swapped every sample, so
    that neither always inherits the other's caches and threads. Calls slow enough that
    TIMED_SAMPLES would take more than COMPARISON_S get fewer samples (LEAST_SAMPLES at
    least): compiling times every region of a model, and a vocabulary's projection takes
    tens of milliseconds a call. `sync` waits for the work the calls queued on a device,
    which returns before computing it."""
    sync = sync or (lambda: None)
    with torch.no_grad():
        first()
        second()
        sync()
        one = max(_one_call(first, 1, sync), 1e-7)  # the second warm-up call of each, timed
        one = max(one, _one_call(second, 1, sync))
        repeats = max(1, round(SAMPLE_S / one))
        count = min(TIMED_SAMPLES, max(LEAST_SAMPLES, int(COMPARISON_S / (2 * one * repeats))))
        calls, samples = (first, second), ([], [])
        for sample in range(count):
            for which in (0, 1) if sample % 2 == 0 else (1, 0):
                samples[which].append(_one_call(calls[which], repeats, sync))
    return statistics.median(samples[0]), statistics.median(samples[1])


def _one_call(forward: Callable[[], Any], repeats: int, sync: Callable[[], Any]) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        forward()
    sync()
    return (time.perf_counter() - start) / repeats
