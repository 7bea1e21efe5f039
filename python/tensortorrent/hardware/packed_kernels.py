"""Timing a oneDNN kernel on a weight packed once against the same work on the weight as
it is stored: a packed copy skips the reorder into oneDNN's blocked layout that the
unpacked kernel does on every call, and costs its size in memory for as long as it is
kept (runtime/packed_weights.py keeps one only where it timed faster)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .side_by_side import time_side_by_side

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PackedTiming:
    unpacked_s: float  # median seconds per call of the kernel the region would run otherwise
    packed_s: float | None  # on the packed weight; None where oneDNN cannot pack or compute it

    @property
    def faster_packed(self) -> bool:
        return self.packed_s is not None and self.packed_s < self.unpacked_s


def time_packing(
    what: object,
    unpacked: Callable[[], Any],
    pack: Callable[[], torch.Tensor],
    on_packed: Callable[[torch.Tensor], Any],
) -> PackedTiming:
    """`unpacked()` against `on_packed(pack())`, side by side."""
    try:
        packed = pack()
        unpacked_s, packed_s = time_side_by_side(unpacked, lambda: on_packed(packed))
    except Exception as error:  # a oneDNN build without this dtype or shape: the weight stays as it is
        log.debug("oneDNN could not compute %s on a packed weight: %s", what, error)
        return PackedTiming(0.0, None)
    log.debug("%s: unpacked %.3f ms, packed %.3f ms", what, unpacked_s * 1e3, packed_s * 1e3)
    return PackedTiming(unpacked_s, packed_s)
