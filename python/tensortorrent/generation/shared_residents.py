"""The programs of a generative module share one set of resident weights.

Under a RAM budget a streamed program holds what fits of its weights for good and
streams the rest on every call; programs planned alone would each hold a set of their
own, together far beyond the budget. Instead, the program with the largest working set
(the longest prefill) is planned first, alone, with the whole budget: the weights it
holds are read once into RAM, and every program is then built with those tensors bound
(counted in its plan as RAM it holds) and streams all the others, holding none of its
own. The module then holds the shared set once plus the working set of the one program
that runs, which each program's plan keeps within the budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..runtime import CompiledModule
from ..storage.safetensors_file import read_slot

Build = Callable[[int, dict[str, torch.Tensor] | None], CompiledModule]


def build_sharing_residents(lengths: Sequence[int], build: Build) -> tuple[dict[int, CompiledModule], int]:
    """Each program by its length (`build(length, shared)` compiles or loads one, `shared`
    the weights by name that it is to bind from RAM, or None), and the bytes of the
    resident weights they share (0 where no program streams)."""
    longest = max(lengths)
    first = build(longest, None)
    slots = first.resident_weight_slots
    if not first.streams_weights:
        # The weights stay in RAM: every program binds the model's tensors, or the loaded file's.
        return {longest: first, **{n: build(n, None) for n in lengths if n != longest}}, 0
    parts = first.artifact_parts()
    bound = {tensor.slot: tensor for tensor in parts.program.bound if tensor.slot in slots}
    first.close()  # its resident set is read again below, once, for all
    shared = {
        tensor.names[0]: read_slot(parts.weights_on_disk, slot) if tensor.tensor.is_meta else tensor.tensor
        for slot, tensor in bound.items()
    }
    programs = {length: build(length, shared) for length in sorted(lengths)}
    return programs, sum(tensor.nbytes for tensor in shared.values())
