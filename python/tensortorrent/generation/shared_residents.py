"""The programs of a generative module share one set of resident weights.

Under a RAM budget a streamed program holds what fits of its weights for good and
streams the rest on every call; programs planned alone would each hold a set of their
own, together far beyond the budget. Instead every program is built with one set of
weights bound from RAM, read once (counted in each plan as RAM it holds), and streams
all the others, holding none of its own. The module then holds the shared set once plus
the working set of the one program that runs, which each program's plan keeps within
the budget.

The set is sized by the program with the largest working set, the longest prefill:
planned alone with the whole budget first, it says how much RAM its working set needs
beside what it would hold. The shared set is then the largest weights that fit beside
that working set (a decode step reads every weight, so what matters is how many bytes
stay; and streaming the smaller weights leaves less in flight, so the working set only
shrinks); the longest prefill is planned once more with it, and what that working set
leaves is filled again."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..errors import MemoryCapacityError
from ..runtime import CompiledModule
from ..storage.safetensors_file import read_slot

Build = Callable[[int, dict[str, torch.Tensor] | None], CompiledModule]


def build_sharing_residents(lengths: Sequence[int], build: Build) -> tuple[dict[int, CompiledModule], int]:
    """Each program by its length (`build(length, shared)` compiles or loads one, `shared`
    the weights by name that it is to bind from RAM, or None), and the bytes of the
    resident weights they share (0 where no program streams)."""
    longest = max(lengths)
    first = build(longest, None)
    if not first.streams_weights:
        # The weights stay in RAM: every program binds the model's tensors, or the loaded file's.
        return {longest: first, **{n: build(n, None) for n in lengths if n != longest}}, 0
    weights = _Weights(first)
    budget, need = first.streamed_ram_bytes
    held = weights.nbytes(first.resident_weight_slots)
    first.close()  # the weights it held are read again below, once, for every program
    shared = weights.largest_within(budget - (need - held))
    probe = build(longest, weights.read(shared))
    _, probed = probe.streamed_ram_bytes
    probe.close()
    del probe  # and the tensors it bound
    larger = weights.largest_within(budget - (probed - weights.nbytes(shared)))
    for chosen in (larger, shared):  # the larger set, unless a program cannot stream beside it
        tensors, programs = weights.read(chosen), {}
        try:
            for length in sorted(lengths):
                programs[length] = build(length, tensors)
            return programs, weights.nbytes(chosen)
        except MemoryCapacityError:
            for program in programs.values():
                program.close()
            if chosen is shared:
                raise
    raise AssertionError("unreachable")


class _Weights:
    """The weights a program streams from disk, by bound slot: their sizes, and their tensors."""

    def __init__(self, program: CompiledModule) -> None:
        parts = program.artifact_parts()
        self._on_disk = parts.weights_on_disk
        self._bound = {tensor.slot: tensor for tensor in parts.program.bound if tensor.slot in self._on_disk.ranges}

    def nbytes(self, slots) -> int:
        return sum(self._on_disk.ranges[slot].nbytes for slot in slots)

    def largest_within(self, room: int) -> frozenset[int]:
        """The largest weights first, each that still fits in `room` bytes."""
        chosen, left = [], room
        for slot in sorted(self._bound, key=lambda s: (-self._on_disk.ranges[s].nbytes, s)):
            if self._on_disk.ranges[slot].nbytes <= left:
                chosen.append(slot)
                left -= self._on_disk.ranges[slot].nbytes
        return frozenset(chosen)

    def read(self, slots) -> dict[str, torch.Tensor]:
        """The tensors of `slots` by name: the model's own where it has them, else read from disk once."""
        return {
            self._bound[slot].names[0]: (
                read_slot(self._on_disk, slot) if self._bound[slot].tensor.is_meta else self._bound[slot].tensor
            )
            for slot in sorted(slots)
        }
