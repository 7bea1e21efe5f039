"""Weights an inference program holds in a device's memory for good (resident on a GPU).

Each is a copy of a tensor of the model in RAM. Training, load_state_dict and in-place
edits update those tensors in place, so before each inference call every copy whose
tensor changed since it was made is copied again, in place: its address stays, and so
does a graph captured over it (runtime/device_direct.py). A tensor's version counter,
which every in-place update bumps, says whether it changed: checking costs a few
hundred nanoseconds per held tensor.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from ..backends.interface import DeviceBackend


@dataclass
class _Held:
    source: torch.Tensor  # the model's tensor in RAM
    copy: torch.Tensor  # in the device's memory
    version: int  # the source's version when the copy was last made
    backend: DeviceBackend
    index: int


class HeldWeights:
    """The copies a program holds on devices, and the tensors they copy."""

    def __init__(self) -> None:
        self._held: list[_Held] = []
        self._lock = threading.Lock()  # concurrent calls copy a changed weight once

    def hold(self, backend: DeviceBackend, index: int, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` held in device `index`'s memory (backend.hold), remembered if a copy."""
        held = backend.hold(index, tensor)
        if held is not tensor:
            self._held.append(_Held(tensor, held, tensor._version, backend, index))
        return held

    def refresh(self) -> int:
        """Copies again each weight whose tensor changed since its copy was made; returns
        the bytes copied."""
        stale = [held for held in self._held if held.source._version != held.version]
        if not stale:
            return 0
        with self._lock:
            return sum(self._copy_again(held) for held in stale)

    @staticmethod
    def _copy_again(held: _Held) -> int:
        version = held.source._version
        if version == held.version:  # another call copied it meanwhile
            return 0
        queue = held.backend.one_off_queue(held.index)
        queue.copy(held.copy, held.source)
        queue.record().wait()
        held.version = version
        return held.source.numel() * held.source.element_size()
