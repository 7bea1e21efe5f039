"""Tensors an inference program holds in a device's memory for good (weights resident on a
GPU, a KV cache written there).

Each is a copy of a tensor of the model in RAM, made once per device: programs over the
same tensors (a generative module's prefill and decode programs, a model compiled twice)
share the copy, so a device holds each weight, and each cache, once.

Training, load_state_dict and in-place edits update the tensors in RAM in place, so
before each inference call every copy whose tensor changed since it was made is copied
again, in place: its address stays, and so does a graph captured over it
(runtime/device_direct.py). A tensor's version counter, which every in-place update
bumps, says whether it changed: checking costs a few hundred nanoseconds per held tensor.

A buffer that a program writes in place on a device (a KV cache: planning/lowering.py)
goes the other way: the device's copy is the newer one from that program's first call on,
and the model's tensor in RAM is left as it was. A program that reads that tensor in RAM
(its region on the CPU) first brings the copy back (bring_back).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from ..backends.interface import DeviceBackend


@dataclass(eq=False)  # compared by identity: one record per copy
class _Held:
    source: torch.Tensor  # the model's tensor in RAM
    copy: torch.Tensor  # in the device's memory
    version: int  # the source's version when the two last agreed
    backend: DeviceBackend
    index: int

    def copy_between(self, target: torch.Tensor, source: torch.Tensor) -> int:
        queue = self.backend.one_off_queue(self.index)
        queue.copy(target, source)
        queue.record().wait()
        return source.numel() * source.element_size()


# Every copy held now, by (backend, device, source tensor): a record lives while a program holds it.
_held: weakref.WeakValueDictionary[tuple[int, int, int], _Held] = weakref.WeakValueDictionary()
_newer: weakref.WeakSet[_Held] = weakref.WeakSet()  # copies written in place since they matched their source
_lock = threading.Lock()  # concurrent calls and builds copy a tensor once


class HeldWeights:
    """The copies one program holds on devices, and the tensors they copy."""

    def __init__(self) -> None:
        self._held: list[_Held] = []
        self._written: list[_Held] = []  # the copies this program's calls write in place

    def hold(self, backend: DeviceBackend, index: int, tensor: torch.Tensor, written: bool = False) -> torch.Tensor:
        """`tensor` held in device `index`'s memory (backend.hold): the copy made there
        already where another program holds one, or a new one. `written`: this program's
        calls write the copy in place: from each call's refresh on, it is the newer."""
        key = (id(backend), index, id(tensor))
        with _lock:
            held = _held.get(key)
            if held is None:
                copy = backend.hold(index, tensor)
                if copy is tensor:  # in that memory already: nothing to hold
                    return tensor
                held = _held[key] = _Held(tensor, copy, tensor._version, backend, index)
        self._held.append(held)
        if written:
            self._written.append(held)
        return held.copy

    def refresh(self) -> int:
        """Before a call: copies again each held tensor changed in RAM since its copy was
        made; then the copies this program writes count as the newer. Returns the bytes copied."""
        copied = 0
        stale = [held for held in self._held if held.source._version != held.version]
        if stale:
            with _lock:
                for held in stale:
                    version = held.source._version
                    if version != held.version:  # else another call copied it meanwhile
                        copied += held.copy_between(held.copy, held.source)
                        held.version = version
                        _newer.discard(held)
        if self._written:
            with _lock:
                _newer.update(self._written)
        return copied


def bring_back(tensors: Iterable[torch.Tensor]) -> int:
    """Before a call that reads `tensors` in RAM: copies into each the copy a device wrote
    in place since the two last agreed. Returns the bytes copied."""
    if not _newer:  # the common case: no program writes a device's copy
        return 0
    wanted = {id(tensor) for tensor in tensors}
    copied = 0
    with _lock:
        for held in [held for held in _newer if id(held.source) in wanted]:
            copied += held.copy_between(held.source, held.copy)
            held.version = held.source._version
            _newer.discard(held)
    return copied
