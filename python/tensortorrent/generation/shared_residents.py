"""The programs of a generative module share one set of resident weights.

Under a RAM budget a streamed program holds what fits of its weights for good and
streams the rest on every call; programs planned alone would each hold a set of their
own, together far beyond the budget. Instead every program is built with one set of
weights bound from RAM, read once (counted in each plan as RAM it holds), and streams
all the others, holding none of its own. The module then holds the shared set once plus
the working set of the one program that runs, which each program's plan keeps within
the budget.

The set is the largest weights that fit beside the working set of the program with
the largest one, the longest prefill, and the reads that the disk needs in flight to
read at its measured speed (up to a quarter of the budget; a decode step reads every weight, so the bytes that stay
are what count, as long as the rest streams at full speed; and the smaller the weights
that stream, the less they hold, so the more can stay). That working set depends on
what streams, so the set starts as if streaming needed only the reads in flight; where
the longest prefill cannot stream beside it, the planner's error names the RAM it
needs, and the set shrinks by the excess, a few times at most, before falling back to
what that program holds planned alone.

Among weights of one size (a decoder's layers have several sets of them), those that
stay are spread evenly over the call (spread_order): every other layer's, say, rather
than the first half's. Then each layer that streams follows one whose compute hides its
reads; kept in call order, the first layers would compute with the disk idle and the last
ones wait on it (measured: decode 10% faster for a 12-layer Llama under half its weights).

Weights that calls only gather from (an embedding's table, stacked experts) are in
every set at no cost: mapped from their file (storage/mapped_weights.py), neither held
in the budget's RAM nor streamed whole on every call."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ..errors import MemoryCapacityError
from ..runtime import CompiledModule
from ..storage.mapped_weights import map_slot
from ..storage.safetensors_file import read_slot

Build = Callable[[int, dict[str, torch.Tensor] | None], CompiledModule]
ATTEMPTS = 4  # sets tried before the one the longest prefill holds alone
IN_FLIGHT_SHARE = 4  # reads in flight take at most this fraction of the budget: 1/4


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
    budget, _, window = first.streamed_ram_bytes
    in_flight = min(window, budget // IN_FLIGHT_SHARE)
    alone = first.resident_weight_slots  # fits: the longest prefill holds it, planned alone
    first.close()  # what it held is read again below, once, for every program
    order = [longest, *sorted(n for n in lengths if n != longest)]
    chosen = weights.largest_within(budget - in_flight)
    for _ in range(ATTEMPTS):
        try:
            return _build_all(order, weights.read(chosen), build), weights.nbytes(chosen)
        except MemoryCapacityError as error:
            if error.smallest_budget_bytes is None:
                raise
            working = error.smallest_budget_bytes - weights.nbytes(chosen)
            chosen = weights.largest_within(min(budget - working - in_flight, weights.nbytes(chosen) - 1))
    alone |= weights.mapped
    return _build_all(order, weights.read(alone), build), weights.nbytes(alone)


def _build_all(order: list[int], shared: dict[str, torch.Tensor], build: Build) -> dict[int, CompiledModule]:
    """Every program, sharing `shared`; none where one cannot stream beside it (the error raised)."""
    programs: dict[int, CompiledModule] = {}
    try:
        for length in order:
            programs[length] = build(length, shared)
    except MemoryCapacityError:
        for program in programs.values():
            program.close()
        raise
    return programs


class _Weights:
    """The weights a program streams from disk, by bound slot: their sizes (in the budget's
    RAM), and their tensors."""

    def __init__(self, program: CompiledModule) -> None:
        parts = program.artifact_parts()
        self._on_disk = parts.weights_on_disk
        self._bound = {tensor.slot: tensor for tensor in parts.program.bound if tensor.slot in self._on_disk.ranges}
        self._read: dict[int, torch.Tensor] = {}  # the last set's tensors: the next set, smaller, reuses them
        # The gathered weights that map: in every set, costing none of the budget.
        gathered = parts.program.gathered_slots & self._bound.keys()
        mapped = {slot: map_slot(self._on_disk, slot) for slot in sorted(gathered)}
        self._mapped = {slot: tensor for slot, tensor in mapped.items() if tensor is not None}

    def nbytes(self, slots) -> int:
        return sum(self._on_disk.ranges[slot].nbytes for slot in slots if slot not in self._mapped)

    def largest_within(self, room: int) -> frozenset[int]:
        """The mapped tables, then the largest weights first, each that still fits in `room`
        bytes; weights of one size in the order that spreads them over the call."""
        chosen, left = list(self._mapped), room
        by_size: dict[int, list[int]] = {}
        for slot in sorted(self._bound.keys() - self._mapped.keys()):
            by_size.setdefault(self._on_disk.ranges[slot].nbytes, []).append(slot)
        for size in sorted(by_size, reverse=True):
            for slot in spread_order(by_size[size]):
                if size > left:
                    break
                chosen.append(slot)
                left -= size
        return frozenset(chosen)

    def read(self, slots) -> dict[str, torch.Tensor]:
        """The tensors of `slots` by name: the model's own where it has them, else read from
        disk (once across the sets tried: those of the last set are kept, and only those)."""
        self._read = {slot: self._read[slot] if slot in self._read else self._tensor(slot) for slot in sorted(slots)}
        return {self._bound[slot].names[0]: tensor for slot, tensor in self._read.items()}

    @property
    def mapped(self) -> frozenset[int]:
        return frozenset(self._mapped)

    def _tensor(self, slot: int) -> torch.Tensor:
        if slot in self._mapped:
            return self._mapped[slot]
        bound = self._bound[slot].tensor
        return read_slot(self._on_disk, slot) if bound.is_meta else bound


def spread_order(items: Sequence[int]) -> list[int]:
    """`items` (in call order) in bit-reversed order of their positions: any prefix of it is
    spread evenly over the call (the first half is every other item, the first quarter
    every fourth), where a prefix of `items` itself would be the call's first part."""
    bits = max(1, (len(items) - 1).bit_length())
    position = {index: int(format(index, f"0{bits}b")[::-1], 2) for index in range(len(items))}
    return [items[index] for index in sorted(range(len(items)), key=position.__getitem__)]
