"""Activations held to a budget: the lowering's spills and reloads (see lowering.py's rules).

A mixin of the lowering: it uses the lowering's buffers, ops and value placement
(`buffer`, `emit_io`, `size`, `on_tier`, `names`, `runner`, `virtual`, `machine`)
and keeps, in generation order, which region outputs are in RAM and which are in the
spill file.
"""

from __future__ import annotations

import bisect

from .. import core
from ..errors import MemoryCapacityError
from ..units import format_bytes
from .machine import RAM

K = core.InstructionKind
LIFE = core.BufferLifetime


class ActivationBudgetError(MemoryCapacityError):
    """A region's own inputs and outputs exceed the activation budget: no choice of what
    streams or stays resident makes room for them."""


class ActivationSpill:
    def init_activation_spill(self, budget: int | None) -> None:
        """No budget: nothing spills. A budget adds the disk tier (where spills go) if the
        weights did not."""
        self.activation_budget = budget
        self.uses: dict[int, list[int]] = {}  # activation slot -> the regions that read it, in order
        self.returned: set[int] = set()  # slots the model returns or writes back
        self.spilled: dict[int, int] = {}  # slot -> its buffer in the spill file
        self.in_ram: set[int] = set()  # activations whose value is in RAM now (in generation order)
        if budget is not None:
            if any(self.on_device):
                raise AssertionError("activations spill from CPU regions only")
            self.disk_tier = len(self.machine.tier_names)

    def next_use(self, slot: int, region: int) -> int | None:
        """The first region from `region` on that reads `slot`: the region count for a value
        returned at the end; None when nothing reads it any more."""
        later = bisect.bisect_left(self.uses[slot], region)
        if later < len(self.uses[slot]):
            return self.uses[slot][later]
        return len(self.runner.kernels) if slot in self.returned else None

    def make_room(self, region: int) -> None:
        """Before `region` computes: its spilled inputs reloaded and the activations beyond
        the budget spilled; the next region's spilled inputs reloaded too where they fit."""
        kernels = self.runner.kernels
        self.in_ram = {s for s in self.in_ram if self.next_use(s, region) is not None}
        needed = {s for s in kernels[region].in_slots if s in self.uses}
        made = sum(self.made_bytes(s) for s in dict.fromkeys(kernels[region].out_slots))
        if not self.fit(region, region, needed, made):
            raise AssertionError(f"region {region}'s working set was checked to fit the activation budget")
        for slot in sorted(needed - self.in_ram):
            self.reload(slot)
        if region + 1 < len(kernels):
            ahead = {s for s in kernels[region + 1].in_slots if s in self.spilled and s not in self.in_ram}
            if ahead and self.fit(region, region + 1, needed | ahead, made):
                for slot in sorted(ahead):
                    self.reload(slot)

    def fit(self, region: int, horizon: int, keep: set[int], extra: int) -> bool:
        """Spills activations first read after `horizon`, furthest first (Belady's rule),
        until those in RAM with `keep` and `extra` bytes fit the budget; False, spilling
        nothing, when they cannot."""
        total = sum(self.size(s) for s in self.in_ram | keep) + extra
        later = sorted(
            (s for s in self.in_ram - keep if self.next_use(s, region) > horizon),
            key=lambda s: (-self.next_use(s, region), s),
        )
        victims = []
        for slot in later:
            if total <= self.activation_budget:
                break
            victims.append(slot)
            total -= self.size(slot)
        if total > self.activation_budget:
            return False
        for slot in victims:
            self.spill(slot)
        return True

    def spill(self, slot: int) -> None:
        """Drops `slot`'s value from RAM, writing it to the spill file unless it is there already."""
        source = self.on_tier.pop((slot, RAM))
        self.in_ram.discard(slot)
        if slot in self.spilled:
            return
        nbytes = self.size(slot)
        target = self.buffer(self.disk_tier, None, LIFE.Transient, f"spilled {slot}", nbytes=nbytes)
        self.emit_io(K.Spill, source, target, f"spill {slot}")
        self.spilled[slot] = target

    def reload(self, slot: int) -> None:
        source = self.spilled[slot]
        target = self.buffer(RAM, slot, LIFE.Transient, f"reloaded {slot}")
        self.emit_io(K.Reload, source, target, f"reload {slot}")
        self.in_ram.add(slot)

    def track_activations(self) -> None:
        """Which values count against the activation budget (region outputs with bytes of
        their own),
        and the regions that read each."""
        runner = self.runner
        self.uses = {s: [] for k in runner.kernels for s in k.out_slots if self.made_bytes(s) > 0}
        for region, kernel in enumerate(runner.kernels):
            for slot in dict.fromkeys(kernel.in_slots):
                if slot in self.uses:
                    self.uses[slot].append(region)
        self.returned = {slot for slot, _ in runner.outputs if slot is not None} | {s for s, _ in runner.mutations}
        working = [
            sum(self.size(s) for s in dict.fromkeys(k.in_slots) if s in self.uses)
            + sum(self.made_bytes(s) for s in dict.fromkeys(k.out_slots))
            for k in runner.kernels
        ]
        largest = max(range(len(working)), key=working.__getitem__, default=None)
        budget = self.activation_budget
        if largest is not None and working[largest] > budget:
            raise ActivationBudgetError(
                f"activation_budget_bytes={budget} ({format_bytes(budget)}) is below the largest working set of a "
                f"region: {self.names[largest]!r} reads and writes {working[largest]} bytes "
                f"({format_bytes(working[largest])}) of activations, which must all be in RAM while it computes"
            )
