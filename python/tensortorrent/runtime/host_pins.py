"""Host memory the devices copy from and to, page-locked once per program, in place.

A GPU copies asynchronously only from page-locked memory; from pageable memory the
driver stages each copy through a buffer of its own, and the copy no longer overlaps
anything. So the memory a program's device copies read and write is registered with
each device's backend once (`DeviceBackend.register_host`), never per tensor per call,
and never copied into a second, pinned, buffer:
- the core's host arenas, as calls first use them: the resident arena, and each pooled
  call arena (they return to their pool and recur, so steady-state calls register
  nothing);
- the model's weights that are copied to a device on every call, their pages
  registered where they are (so RAM holds them once).
A range a backend refuses (memory registered already, by another program of the same
model, say) is counted and left pageable: its copies still work, staged. Everything
registered is released when the program is collected, before the memory itself: the
pins keep what owns each range alive until then (CPython frees an object's attributes
in order, and a range unmapped while registered would stay registered, its address
reused by a later mapping). The call's inputs and the
activations the CPU computes are torch's own allocations and stay pageable.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable

import torch

from ..backends.interface import DeviceBackend, page_bounds


class HostPins:
    """The ranges registered with each of `backends` for one program."""

    def __init__(self, backends: Iterable[DeviceBackend]) -> None:
        self._backends = list({id(b): b for b in backends}.values())
        self._pinned: dict[int, tuple[int, list[DeviceBackend]]] = {}  # address -> (bytes, who registered it)
        self._refused: dict[int, int] = {}  # address -> bytes some backend refused
        self._owners: dict[int, object] = {}  # by id: what holds the ranges' memory, kept until they are released
        self._lock = threading.Lock()
        self.release = weakref.finalize(self, _release, self._pinned, self._owners)  # now, or when collected

    def cover(self, ranges: Iterable[tuple[int, int]], owner: object) -> None:
        """Registers with every backend the pages of each (address, bytes) range that no
        earlier range of this program covered (CUDA refuses a page registered twice, and
        its refusal is an error that later kernels would report). `owner` holds the
        ranges' memory: it is kept alive until they are unregistered."""
        with self._lock:
            self._owners[id(owner)] = owner  # once: a call's arenas come back with the same owner
            for address, nbytes in ranges:
                if nbytes <= 0:
                    continue
                for begin, size in self._uncovered(*page_bounds(address, nbytes)):
                    took = [b for b in self._backends if b.register_host(begin, size)]
                    self._pinned[begin] = (size, took)
                    if len(took) < len(self._backends):
                        self._refused[begin] = size

    def _uncovered(self, begin: int, end: int) -> list[tuple[int, int]]:
        """The parts of [begin, end) outside every range seen, as (address, bytes)."""
        parts = [(begin, end)]
        for start, (size, _) in self._pinned.items():
            parts = [piece for b, e in parts for piece in ((b, min(e, start)), (max(b, start + size), e))]
            parts = [(b, e) for b, e in parts if b < e]
        return [(b, e - b) for b, e in parts]

    @property
    def pinned_bytes(self) -> int:
        with self._lock:
            return sum(nbytes for address, (nbytes, _) in self._pinned.items() if address not in self._refused)

    @property
    def refused_bytes(self) -> int:
        with self._lock:
            return sum(self._refused.values())

    def describe(self) -> str:
        line = (
            f"Host memory page-locked in place for the devices' copies: {self.pinned_bytes} bytes in "
            f"{len(self._pinned) - len(self._refused)} range(s) (the core's arenas, weights copied per call)"
        )
        refused = self.refused_bytes
        return line + (f"; {refused} bytes refused by a backend, copied staged" if refused else "")


def _release(pinned: dict[int, tuple[int, list[DeviceBackend]]], owners: dict[int, object]) -> None:
    for address, (_, backends) in pinned.items():
        for backend in backends:
            backend.unregister_host(address)
    pinned.clear()
    owners.clear()  # only now may the memory go


def page_spans(tensors: Iterable[torch.Tensor]) -> list[tuple[int, int]]:
    """The whole pages holding `tensors`' storages, as (address, bytes) ranges, those that
    overlap or touch merged (a page registers once)."""
    spans = sorted(
        {
            page_bounds(start, storage.nbytes())
            for storage in (t.untyped_storage() for t in tensors if t.device.type == "cpu")
            if storage.nbytes() and (start := storage.data_ptr())
        }
    )
    merged: list[list[int]] = []
    for begin, end in spans:
        if merged and begin <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([begin, end])
    return [(begin, end - begin) for begin, end in merged]
