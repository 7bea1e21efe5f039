"""Measured region times, kept for the life of the process under a profiling key.

A region's key digests what decides its speed: its generated code, the shape, dtype and
stride of every value it reads, the torch version and its thread count. Compiling a model
whose regions were all measured before (the same model again, or a model of the same
shapes) reuses those times and skips the profiling run; anything new measures every
region again. TT_PROFILE_CACHE=0 turns the cache off; CompiledModule.profile() always
measures.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any

import torch
from torch import fx

from ..environment import env_flag
from .costs import measure_cpu_seconds

CAPACITY = 4096  # regions remembered; the oldest are forgotten first


def region_key(module: fx.GraphModule, in_nodes: list[fx.Node]) -> str:
    """The profiling key of a region kernel (without the process-wide parts)."""
    inputs = []
    for node in in_nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            inputs.append(f"{tuple(value.shape)}/{value.dtype}/{tuple(value.stride())}")
        else:
            inputs.append(repr(value))
    return hashlib.sha256((module.code + "\n" + ";".join(inputs)).encode()).hexdigest()


class ProfileCache:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self._seconds: OrderedDict[str, float] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    @staticmethod
    def _full_key(region: str) -> str:
        return f"{region}/{torch.__version__}/{torch.get_num_threads()}"

    def lookup(self, regions: list[str]) -> list[float] | None:
        """The times of all `regions`, or None unless every one is known."""
        with self._lock:
            keys = [self._full_key(r) for r in regions]
            if not all(k in self._seconds for k in keys):
                return None
            for key in keys:
                self._seconds.move_to_end(key)
            return [self._seconds[k] for k in keys]

    def store(self, regions: list[str], seconds: list[float]) -> None:
        with self._lock:
            for region, value in zip(regions, seconds):
                key = self._full_key(region)
                self._seconds[key] = value
                self._seconds.move_to_end(key)
            while len(self._seconds) > self._capacity:
                self._seconds.popitem(last=False)


PROFILES = ProfileCache()


def profiled_cpu_seconds(runner, flat_inputs: list[Any]) -> tuple[list[float], bool]:
    """Each region's CPU seconds, and whether they came from the cache rather than a run now."""
    keys = [kernel.profile_key for kernel in runner.kernels]
    if env_flag("TT_PROFILE_CACHE") is not False:
        cached = PROFILES.lookup(keys)
        if cached is not None:
            return cached, True
    seconds = measure_cpu_seconds(runner, flat_inputs)
    PROFILES.store(keys, seconds)
    return seconds, False
