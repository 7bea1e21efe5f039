"""Where the lowering puts the weights: the model's own tensors or file ranges read once,
in RAM or on a device, and the Loads (and for a device region, the Copy after them) of
the regions whose weights stream on every call (see lowering.py's rules).

A mixin of the lowering: it uses the lowering's buffers, ops and value placement
(`buffer`, `emit`, `copy`, `on_tier`, `preset`, `runner`, `weights`, `virtual`,
`resident`, `machine`, `names`) and records what it loaded (`disk_resident`,
`disk_streamed`, `loaded_slot`).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass

from .. import core
from .machine import IO_QUEUE, RAM
from .op import Op
from .weights_on_disk import LOAD_ALIGNMENT, load_phase

K = core.InstructionKind
LIFE = core.BufferLifetime


@dataclass(frozen=True)
class StreamedWeight:
    slot: int
    buffer: int  # the host buffer its Load writes
    nbytes: int


class WeightStreams:
    """The weights' buffers and their loads and copies, for _Lowering in lowering.py."""

    def weights_in_ram(self) -> None:
        """The bound tensors in RAM (the model's own, or loaded once from disk), but those
        streamed from disk and those loaded once onto the device of their region."""
        streamed = {s for r in self.streamed_from_disk for s in self.weights_on_disk(r)}
        on_devices = self.loaded_onto_devices
        for slot in range(self.bound):
            if slot in streamed or slot in on_devices or self.split_in_ram(slot):
                continue
            if slot in self.runner.mapped_slots:  # the page cache's, not the budget's
                buffer = self.buffer(RAM, slot, LIFE.Resident, f"weight {slot} (mapped)", nbytes=0, torch_owned=True)
            elif self.weights is None or slot not in self.weights.ranges:
                buffer = self.buffer(RAM, slot, LIFE.Resident, f"weight {slot}", torch_owned=True)
            else:
                buffer = self.loaded_once(RAM, slot)
            self.preset.append((buffer, slot))

    def loaded_once(self, tier: int, slot: int) -> int:
        """A resident buffer on `tier` that weight `slot` is read into from disk once: in
        RAM, the core's, placed for O_DIRECT reads; on a device, its backend's tensor (read
        through host memory when the program is built)."""
        place = self.weights.ranges[slot]
        placed = dict(alignment=LOAD_ALIGNMENT, phase=load_phase(place)) if tier == RAM else {}
        buffer = self.buffer(
            tier, slot, LIFE.Resident, f"weight {slot}", nbytes=place.nbytes, shape=list(place.shape), **placed
        )
        self.disk_resident[slot] = buffer
        return buffer

    @functools.cached_property
    def loaded_onto_devices(self) -> dict[int, int]:
        """Weights on disk that only a region resident on a virtual device reads: slot ->
        that region. They are read once into its device's memory and never held in RAM."""
        if self.weights is None:
            return {}
        return {
            slot: region
            for region in range(len(self.runner.kernels))
            if self.on_device[region] and self.resident[region]
            for slot in self.weights_on_disk(region)
        }

    def own_weights(self, region: int) -> list[int]:
        return self.runner.own_weights.get(region, [])

    def weights_on_disk(self, region: int) -> list[int]:
        """The region's own weights that a Load can read: those with a range on disk."""
        return [s for s in self.own_weights(region) if s in self.weights.ranges]

    def resident_on_devices(self) -> None:
        """Resident parameters of regions on virtual devices: the host tensors, counted once
        per device, or where only the region reads a weight on disk, read once into the
        device's memory. So is, whatever the region's weights do, a buffer that a region on
        a device writes in place (a KV cache): the device's copy is the buffer from then on
        (see kept_on_devices)."""
        on_devices = self.loaded_onto_devices
        for region, kernel in enumerate(self.runner.kernels):
            if not self.on_device[region]:
                continue
            tier = self.tier_of(region)
            held = [s for s in kernel.in_slots if s < self.bound] if self.resident[region] else []
            for slot in self.kept_on_devices(region):
                self.homes[slot] = tier
                held.append(slot)
            for slot in held:
                if (slot, tier) not in self.on_tier:
                    if slot in on_devices:
                        buffer = self.loaded_once(tier, slot)
                    else:
                        buffer = self.buffer(tier, slot, LIFE.Resident, f"weight {slot}", torch_owned=True)
                    self.preset.append((buffer, slot))

    def kept_on_devices(self, region: int) -> list[int]:
        """The bound slots of the buffers region `region` (on a device) writes in place, in
        an inference program: held in the device's memory, written there and never copied
        back to RAM. A training program's copies them in and out on every call, as autograd
        records its calls on clones of the buffers it updates."""
        if self.runner.saved_bytes:
            return []
        in_place = self.runner.in_place
        return [in_place[slot] for slot in self.runner.kernels[region].out_slots if slot in in_place]

    def streamed_queues(self) -> dict[int, list[int]]:
        """Per queue that streams weights (io, or a device's h2d link), its streamed regions in order."""
        queues: dict[int, list[int]] = defaultdict(list)
        for region in self.streamed_from_disk:
            queues[IO_QUEUE].append(region)
        for region, kernel in enumerate(self.runner.kernels):
            if self.on_device[region] and not self.resident[region] and region not in self.streamed_from_disk:
                tier = self.tier_of(region)
                if any(s < self.bound and (s, tier) not in self.on_tier for s in kernel.in_slots):
                    queues[self.machine.link_queue(RAM, tier)].append(region)
        return queues

    def window_waits(self, queue: int, order: list[int]) -> list[int]:
        """Per streamed region of `queue` (by place in `order`), the place of the one whose
        Free its weights wait for (-1: none): the last one such that the weights from the
        one after it through this one fit in prefetch + 1 times the largest region's bytes."""
        sizes = [self.streamed_bytes(queue, region) for region in order]
        window = (self.prefetch + 1) * max(sizes, default=0)
        waits, held, first = [], 0, 0
        for size in sizes:
            held += size
            while held > window:
                held -= sizes[first]
                first += 1
            waits.append(first - 1)
        return waits

    def streamed_bytes(self, queue: int, region: int) -> int:
        """The bytes of `region`'s weights that `queue` streams on every call."""
        if queue == IO_QUEUE:
            return sum(self.weights.ranges[slot].nbytes for slot in self.weights_on_disk(region))
        tier = self.tier_of(region)
        slots = {s for s in self.runner.kernels[region].in_slots if s < self.bound and (s, tier) not in self.on_tier}
        return sum(self.size(slot) for slot in slots)

    def stream_through(
        self, queue: int, order: list[int], waits: list[int], computing: int, weights_of: dict[int, dict[int, int]]
    ) -> None:
        """Issues, before the `computing`-th streamed region of `order` computes, the
        streamed weights not issued yet of those whose wait (window_waits) is over by then."""
        for index, earlier in enumerate(waits):
            if earlier >= computing:
                break
            region = order[index]
            if region in weights_of:
                continue
            deps = {self.weight_free[order[earlier]]} if earlier >= 0 else set()
            if queue == IO_QUEUE and self.on_device[region]:
                weights_of[region] = self.copy_loaded(region, self.load(region, deps))
            elif queue == IO_QUEUE:
                weights_of[region] = self.load(region, deps)
            elif region in self.splits:
                weights_of[region] = self.copy_device_rows(region, deps)
            else:
                tier = self.tier_of(region)
                slots = [s for s in dict.fromkeys(self.runner.kernels[region].in_slots) if s < self.bound]
                params = [self.on_tier[(s, RAM)] for s in slots if (s, tier) not in self.on_tier]
                copies = self.copy(params, tier, deps, f"{self.names[region]} params", register=False)
                weights_of[region] = {self.value_of[p]: c for p, c in zip(params, copies)}

    def load(self, region: int, deps: set[int]) -> dict[int, int]:
        loaded, self.disk_streamed[region] = {}, []
        for slot in self.weights_on_disk(region):
            place = self.weights.ranges[slot]
            source = self.buffer(
                self.disk_tier,
                None,
                LIFE.Resident,
                f"weight {slot} on disk",
                nbytes=place.nbytes,
                file=place.file,
                file_offset=place.offset,
                crc32c=place.crc32c,
            )
            name = f"{self.names[region]} weight {slot}"
            target = self.buffer(
                RAM, None, LIFE.Transient, name, nbytes=place.nbytes, alignment=LOAD_ALIGNMENT, phase=load_phase(place)
            )
            self.emit(Op(K.Load, IO_QUEUE, [source], [target], set(deps), f"load {name}", -1.0))
            self.disk_streamed[region].append(StreamedWeight(slot, target, place.nbytes))
            self.loaded_slot[target] = slot
            loaded[slot] = target
        return loaded

    def copy_loaded(self, region: int, loaded: dict[int, int], deps: set[int] = frozenset()) -> dict[int, int]:
        """A device region's weights in RAM (just loaded, or a split layer's device rows:
        slot -> buffer) copied to its device in one Copy on its link after `deps`; loaded
        buffers are freed after it, the copies after the region."""
        tier = self.tier_of(region)
        sources = list(loaded.values())
        targets = []
        for slot, source in loaded.items():
            nbytes = self.buffers[source]["bytes"]
            label = f"{self.names[region]} weight {slot} on {self.machine.tier_names[tier]}"
            target = self.buffer(tier, None, LIFE.Transient, label, nbytes=nbytes)
            self.loaded_slot[target] = slot
            if source in self.meta_of:
                self.meta_of[target] = self.meta_of[source]
            targets.append(target)
        seconds = self.machine.link_seconds(
            self.machine.link(RAM, tier), sum(self.buffers[b]["bytes"] for b in sources)
        )
        deps = {self.producer[b] for b in sources if b in self.producer} | set(deps)
        label = f"{self.names[region]} weights -> {self.machine.tier_names[tier]}"
        queue = self.machine.link_queue(RAM, tier)
        self.emit(Op(K.Copy, queue, sources, targets, deps, label, seconds, self.declared(tier, seconds)), serial=True)
        return dict(zip(loaded, targets))
