"""Lowering: a placement becomes the one Program that the simulator times and the data plane runs.

Tiers: 0 is host RAM; each virtual device adds its memory; a weights file adds "disk",
last. Queues: "cpu" (its compute slots), "io" (loads in flight), then per device its
compute and its two links with RAM (h2d, d2h), then each peer link between two devices
("a->b"), each running one instruction at a time.

Rules, in generation order (region by region, in topological order):
- weights in memory are the model's own tensors in RAM (torch-owned residents), and so
  are the packed copies a CPU region's kernel keeps (runtime/packed_weights.py). A region
  on a virtual device reads a resident parameter from that device's tier (the same host
  tensor, counted there once) or gets a copy from RAM before it computes; a CPU region
  whose weights stream reads them from a `Load` of their file range; a region on a
  virtual device whose weights stream from disk gets them by a `Load` into RAM and one
  `Copy` on its link to the device (the RAM buffers freed after it). Before a region
  computes, the streamed weights of the next streamed regions of the same queue are
  issued too, within a window of prefetch + 1 times the largest streamed region's bytes:
  each waits for the Free of the weights it would overflow the window beside. At most
  that many bytes of streamed weights are held per queue: `prefetch` regions ahead
  where they are the largest, more where they are smaller (a layer's small projections),
  so that small loads keep the disk as busy as large ones.
- with an activation budget (CPU regions), the region outputs held in RAM stay within it:
  before a region computes, its spilled inputs are `Reload`ed and what does not fit is
  `Spill`ed to the spill file (the value needed furthest ahead first; a value already on
  disk is just dropped); the next region's spilled inputs are reloaded then too where
  they fit, so that their reads overlap this region's compute.
- a value needed on another tier is copied once per tier, grouped by the instruction that
  made it; between two devices it goes over their peer link where they have one, else
  through RAM. Model outputs and mutated buffers come back to RAM, but a buffer
  written in place on a device (a KV cache), which that device holds for good.
- a virtual device and a link run their instructions one at a time, in generation order.
- every transient buffer is freed right after its last reader in generation order (the
  Free waits for every reader, so it runs after the last one to finish).
- in a training program, each region's Compute also writes a buffer of the bytes
  autograd saves there for backward, held to the end of the call.
- a split layer (on a virtual device, its weights in RAM) computes the CPU's rows on the
  CPU while the device computes its own; the CPU's result is copied to the device, which
  joins the two (planning/split_lowering.py).
- a device's buffers are its backend's tensors (torch-owned: planned and counted, never
  held by the core), and so are compute outputs but those a Spill reads (written into
  the core's buffer, so the Spill runs natively); copies to and from devices run on
  the devices' queues (runtime/device_copies.py). Values without bytes (a Python
  scalar, an empty tensor) are carried by the Python side: their copies move nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from .. import core
from .activation_spill import ActivationSpill
from .layer_split import LayerSplit
from .machine import CPU_QUEUE, IO_QUEUE, RAM, PlanMachine
from .op import Op
from .split_lowering import SplitLayers
from .weight_streams import StreamedWeight, WeightStreams
from .weights_on_disk import WeightsOnDisk

K = core.InstructionKind
LIFE = core.BufferLifetime
UNBOUNDED = 1 << 62  # bytes: a capacity that never binds


@dataclass(frozen=True)
class LoweredProgram:
    """A placement's Program, and what the Python side needs to run its Compute instructions."""

    program: core.Program
    seconds: tuple[float, ...]  # per instruction: its predicted duration (-1: a load, from the disk's speed)
    prefetch: int
    region_names: tuple[str, ...]
    region_of: dict[int, int]  # compute instruction id -> region
    operands: dict[int, tuple[tuple[int, ...], tuple[int, ...]]]  # compute id -> buffers per in_slot, per out_slot
    preset: tuple[tuple[int, int], ...]  # (buffer, slot): holds a bound tensor's or an input's value from the start
    carried: dict[int, int]  # copy -> its source, for values without bytes (the Python side carries them)
    views: dict[int, tuple[torch.dtype, tuple[int, ...]]]  # buffers the core holds, handed to torch as views
    outputs: tuple[tuple[int | None, object], ...]  # per model output: (buffer in RAM, or None and a constant)
    # Per runner.mutations entry: the buffer in RAM written back into the model's, or None
    # where a device holds the buffer and writes it in place (see homes).
    mutations: tuple[int | None, ...]
    resident: dict[int, int] = field(default_factory=dict)  # bound slot -> buffer loaded once from the file
    parts: dict[int, tuple[int, int]] = field(default_factory=dict)  # preset buffer -> rows of its slot's tensor
    joined: frozenset[int] = frozenset()  # compute ids that join a split layer's two sides
    # Bound slot -> the device tier that holds its buffer and writes it in place (a KV
    # cache): the model's tensor in RAM is not updated (runtime/held_weights.py).
    homes: dict[int, int] = field(default_factory=dict)
    splits: tuple[LayerSplit, ...] = ()
    streamed: dict[int, tuple[StreamedWeight, ...]] = field(default_factory=dict)  # region -> weights loaded per call
    # The program the simulator timed for this one, where this one keeps more loads in
    # flight (planning/streaming.py: with_io_depth); None: this one.
    timed_as: LoweredProgram | None = None

    @property
    def budget_bytes(self) -> int:
        return self.program.tiers[RAM].capacity_bytes

    @property
    def streamed_bytes(self) -> int:
        return sum(w.nbytes for weights in self.streamed.values() for w in weights)

    @property
    def spilled_bytes(self) -> int:
        """Bytes of activations one call writes to the spill file."""
        program = self.program
        return sum(program.buffers[i.writes[0]].bytes for i in program.schedule.instructions if i.kind == K.Spill)

    def rebuilt(
        self, capacities: Sequence[int] | None = None, predicted_us: Sequence[tuple[float, float]] | None = None
    ) -> LoweredProgram:
        """The same program with other tier capacities (per tier but disk; None: as they
        are), its instructions carrying `predicted_us` (start, end) each (see
        simulated_us). Raises MemoryCapacityError when its memory plan exceeds a capacity."""
        program = self.program
        tiers = list(program.tiers)
        for tier, capacity in zip(tiers, capacities or ()):
            tier.capacity_bytes = capacity
        # The schedule's deps include those the memory plan added; the rebuilt plan is the same.
        instructions = [
            _timed(i, *times) for i, times in zip(program.schedule.instructions, predicted_us or _untimed(program))
        ]
        rebuilt = core.Program(tiers, program.queues, program.files, program.buffers, instructions, program.outputs)
        return replace(self, program=rebuilt)


def _timed(i: core.Instruction, start_us: float, end_us: float) -> core.Instruction:
    """A copy of instruction `i` predicted to run from start_us to end_us."""
    return core.Instruction(
        i.id,
        i.kind,
        region=i.region,
        device=i.device,
        label=i.label,
        deps=list(i.deps),
        predicted_start_us=start_us,
        predicted_end_us=end_us,
        declared_us=i.declared_us,
        queue=i.queue,
        reads=list(i.reads),
        writes=list(i.writes),
    )


def _untimed(program: core.Program) -> list[tuple[float, float]]:
    return [(i.predicted_start_us, i.predicted_end_us) for i in program.schedule.instructions]


def simulated_us(simulated) -> list[tuple[float, float]]:
    """A simulation's (start, end) per instruction, in microseconds."""
    return [(start * 1e6, end * 1e6) for start, end in zip(simulated.start_s, simulated.end_s)]


def lower(
    runner,
    region_names: Sequence[str],
    machine: PlanMachine,
    devices: Sequence[int],
    resident: Sequence[bool],
    compute_s: Sequence[Sequence[float]],
    prefetch: int,
    cpu_slots: int,
    capacities: Sequence[int] | None = None,
    weights: WeightsOnDisk | None = None,
    streamed: frozenset[int] = frozenset(),
    io_depth: int = 1,
    activation_budget: int | None = None,
    splits: Sequence[LayerSplit] = (),
) -> LoweredProgram:
    """The Program of placement `devices`/`resident` (per region) of `runner`'s regions on
    `machine`. compute_s[region][device]: a region's predicted seconds on each device.
    `capacities`: per tier (but disk) the most bytes the program may hold (default:
    unbounded, for ranking placements). With `weights`, the bound tensors are ranges of
    that file: the regions in `streamed` load their own weights on every call (a region
    on a virtual device: into RAM, then copied to the device) and the rest are loaded
    once. `activation_budget`: the most bytes of region
    outputs held in RAM at once (CPU regions), the rest spilled. `splits`: layers on a
    virtual device whose rows the CPU shares (planning/layer_split.py). Raises
    MemoryCapacityError when the memory plan exceeds a capacity (from the core) or a
    region's own inputs and outputs exceed the activation budget."""
    lowering = _Lowering(
        runner, region_names, machine, devices, resident, compute_s, prefetch, weights, streamed, activation_budget
    )
    lowering.init_splits({split.layer.region: split for split in splits})
    return lowering.run(cpu_slots, io_depth, capacities)


class _Lowering(WeightStreams, ActivationSpill, SplitLayers):
    def __init__(
        self, runner, names, machine, devices, resident, compute_s, prefetch, weights, streamed, activation_budget
    ) -> None:
        self.runner, self.names, self.machine = runner, list(names), machine
        self.devices, self.resident, self.compute_s = list(devices), list(resident), compute_s
        self.prefetch, self.weights = prefetch, weights
        self.bound = runner.bound_count
        self.on_device = [not machine.devices[d].is_cpu for d in self.devices]
        self.streamed_from_disk = sorted(streamed)
        self.disk_tier = len(machine.tier_names) if weights is not None else None  # also where spills go
        self.buffers: list[dict] = []
        self.ops: list[Op] = []
        self.producer: dict[int, int] = {}  # buffer -> op that writes it
        self.value_of: dict[int, int] = {}  # buffer -> the slot whose value it holds
        self.on_tier: dict[tuple[int, int], int] = {}  # (slot, tier) -> buffer holding its value there
        self.origin: dict[int, int] = {}  # slot -> the buffer that first held its value (where it was made)
        self.last_on_queue: dict[int, int] = {}  # serial queues: queue -> its last op
        self.preset: list[tuple[int, int]] = []
        self.carried: dict[int, int] = {}
        self.kept: set[int] = set()  # buffers never freed by the program
        self.weight_free: dict[int, int] = {}  # region -> the Free of its streamed weights
        self.region_of: dict[int, int] = {}
        self.operands: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self.disk_resident: dict[int, int] = {}
        self.disk_streamed: dict[int, list[StreamedWeight]] = {}
        self.loaded_slot: dict[int, int] = {}  # buffer a Load writes -> the bound slot it holds
        self.homes: dict[int, int] = {}  # bound slot -> the device tier holding the buffer a region writes in place
        self.alias_of: dict[int, int] = {}  # a region's output written in place -> the buffer it wrote
        self.init_activation_spill(activation_budget)

    # Building blocks -------------------------------------------------------------------

    def size(self, slot: int) -> int:
        """A value's planned bytes; 0 for one the Python side carries (not one tensor of static shape)."""
        return self.runner.slot_bytes[slot] if self.runner.slot_meta[slot] is not None else 0

    def buffer(self, tier: int, slot: int | None, lifetime, label: str, register: bool = True, **extra) -> int:
        """A new buffer; with `register`, the one later readers on `tier` use for `slot`."""
        nbytes = extra.pop("nbytes", self.size(slot) if slot is not None else 0)
        ident = len(self.buffers)
        self.buffers.append(dict(id=ident, tier=tier, bytes=nbytes, lifetime=lifetime, label=label, **extra))
        if slot is not None:
            self.value_of[ident] = slot
            if register:
                self.on_tier.setdefault((slot, tier), ident)
                self.origin.setdefault(slot, ident)
        return ident

    def made_bytes(self, slot: int) -> int:
        """The bytes a CPU region's output adds: none for one it writes in place into a
        buffer of the model in RAM (a KV cache), whose bytes are counted as the buffer's."""
        return 0 if slot in self.runner.in_place else self.size(slot)

    def output_buffer(self, tier: int, slot: int, label: str) -> int:
        """A region's output buffer (see made_bytes). One written in place into a buffer on
        the region's tier (the model's in RAM, or the copy a device holds for good) adds no
        bytes; in a training program on a device, it is the device's copy of the buffer,
        copied back to RAM after the call, and keeps its bytes."""
        written = self.runner.in_place.get(slot)
        home = self.on_tier.get((written, tier)) if self.homes.get(written, RAM) == tier else None
        if home is None:
            return self.buffer(tier, slot, LIFE.Transient, label)
        buffer = self.buffer(tier, slot, LIFE.Transient, f"{label} (in place)", nbytes=0, torch_owned=True)
        self.alias_of[buffer] = home  # a copy of the value elsewhere reads the buffer's bytes
        return buffer

    def emit(self, op: Op, serial: bool = False) -> int:
        ident = len(self.ops)
        if serial and op.queue in self.last_on_queue:
            op.deps.add(self.last_on_queue[op.queue])
        if serial:
            self.last_on_queue[op.queue] = ident
        self.ops.append(op)
        for buffer in op.writes:
            self.producer[buffer] = ident
        return ident

    def emit_io(self, kind, source: int, target: int, label: str) -> None:
        """One buffer spilled or reloaded on the I/O queue once `source` is written (timed
        by the disk's speed)."""
        self.emit(Op(kind, IO_QUEUE, [source], [target], {self.producer[source]}, label, -1.0))

    def tier_of(self, region: int) -> int:
        return self.machine.devices[self.devices[region]].tier

    def compute_queue(self, region: int) -> int:
        return self.machine.compute_queue(self.tier_of(region))

    def declared(self, tier: int, seconds: float) -> float:
        """What an instruction involving `tier` declares: its time on a virtual device, else none."""
        return seconds if tier != RAM and self.machine.device_on_tier(tier).declared else 0.0

    def copy(self, sources: list[int], to_tier: int, deps: set[int], label: str, register: bool = True) -> list[int]:
        """One Copy of `sources` (all on one tier) to `to_tier`, on their link; with
        `register`, later readers there use the copies (streamed weights are their region's alone)."""
        from_tier = self.buffers[sources[0]]["tier"]
        reads = [self.alias_of.get(source, source) for source in sources]
        targets = []
        for source in sources:
            slot = self.value_of[source]
            target = self.buffer(to_tier, slot, LIFE.Transient, f"{label} {slot}", register)
            if self.size(slot) == 0:
                self.carried[target] = source
            targets.append(target)
        link = self.machine.link(from_tier, to_tier)
        seconds = self.machine.link_seconds(link, sum(self.buffers[s]["bytes"] for s in reads))
        name = f"{label} -> {self.machine.tier_names[to_tier]}"
        queue = self.machine.link_queue(from_tier, to_tier)
        self.emit(
            Op(K.Copy, queue, reads, targets, deps, name, seconds, self.declared(max(from_tier, to_tier), seconds)),
            serial=True,
        )
        return targets

    def values_on(self, slots: list[int], tier: int) -> dict[int, int]:
        """Each slot's buffer on `tier`, copying what is not there yet (see copy_source)."""
        found, missing = {}, []
        for slot in dict.fromkeys(slots):
            if (slot, tier) in self.on_tier:
                found[slot] = self.on_tier[(slot, tier)]
            else:
                missing.append(slot)
        if tier == RAM:
            for slot in [s for s in missing if s in self.spilled]:
                self.reload(slot)
                found[slot] = self.on_tier[(slot, RAM)]
                missing.remove(slot)
        if not missing:
            return found
        sources = {slot: self.copy_source(slot, tier) for slot in missing}
        through_ram = [slot for slot, source in sources.items() if source is None]
        if through_ram:
            self.values_on(through_ram, RAM)
        groups: dict[tuple[int, int], list[int]] = defaultdict(list)
        for slot in missing:
            source = self.on_tier[(slot, RAM)] if sources[slot] is None else sources[slot]
            groups[(self.producer.get(source, -1), self.buffers[source]["tier"])].append(source)
        for (producer, _), group in sorted(groups.items()):
            origin = self.ops[producer].label if producer >= 0 else "inputs"
            for source, target in zip(group, self.copy(group, tier, {producer} - {-1}, f"{origin} out")):
                found[self.value_of[source]] = target
        return found

    def copy_source(self, slot: int, tier: int) -> int | None:
        """The buffer a copy of `slot` to `tier` reads: where it was made when `tier` is
        RAM, its copy in RAM, or its buffer on a peer of `tier`; None when it must reach
        RAM first."""
        if tier == RAM:
            return self.origin[slot]
        if (slot, RAM) in self.on_tier:
            return self.on_tier[(slot, RAM)]
        return next(
            (self.on_tier[(slot, a)] for a, b, _ in self.machine.peer_links if b == tier and (slot, a) in self.on_tier),
            None,
        )

    def saved_for_backward(self, region: int, tier: int) -> list[int]:
        """In a training program, the buffer of what autograd saves in `region` until
        backward (planning/saved_for_backward.py), held to the end of the call."""
        nbytes = self.runner.saved_bytes[region] if self.runner.saved_bytes else 0
        if not nbytes:
            return []
        buffer = self.buffer(tier, None, LIFE.Transient, f"{self.names[region]} saved for backward", nbytes=nbytes)
        self.kept.add(buffer)
        return [buffer]

    # The program -----------------------------------------------------------------------

    def run(self, cpu_slots: int, io_depth: int, capacities) -> LoweredProgram:
        runner = self.runner
        self.weights_in_ram()
        for region, kernel in enumerate(runner.kernels):
            if kernel.held_bytes:  # packed weights, held by the region's kernel: planned, never read
                label = f"{self.names[region]} packed weights"
                self.buffer(RAM, None, LIFE.Resident, label, nbytes=kernel.held_bytes, torch_owned=True)
        for slot in runner.input_slots:
            self.preset.append((self.buffer(RAM, slot, LIFE.Input, f"input {slot}"), slot))
        self.resident_on_devices()
        queues = {queue: (order, self.window_waits(queue, order)) for queue, order in self.streamed_queues().items()}
        weights_of: dict[int, dict[int, int]] = {}  # streamed region -> slot -> its streamed buffer
        spilling = self.activation_budget is not None
        if spilling:
            self.track_activations()
        for region, kernel in enumerate(runner.kernels):
            tier = self.tier_of(region)
            split = self.splits.get(region)
            if split is not None:  # its input on the device before the weights it prefetches
                self.values_on([s for s in kernel.in_slots if s not in self.split_slots], tier)
            for queue, (order, waits) in queues.items():
                self.stream_through(queue, order, waits, sum(1 for r in order if r < region), weights_of)
            if spilling:
                self.make_room(region)
            cpu_rows = self.cpu_rows(region) if split is not None else None
            mine = weights_of.get(region, {})
            placed = self.values_on([s for s in kernel.in_slots if s not in mine], tier)
            inputs = [mine.get(slot, placed.get(slot)) for slot in kernel.in_slots]
            label = f"{self.names[region]} out"
            outputs = [self.output_buffer(tier, slot, label) for slot in kernel.out_slots]
            for slot, buffer in zip(kernel.out_slots, outputs):
                self.on_tier[(slot, tier)] = buffer
            if spilling:
                self.in_ram.update(s for s in kernel.out_slots if s in self.uses)
            deps = {self.producer[b] for b in inputs if b in self.producer}
            seconds = float(self.compute_s[region][self.devices[region]])
            seconds *= split.device_share if split is not None else 1.0
            declared = self.declared(tier, seconds)
            writes = outputs if split is None else [self.device_rows_out(region)]
            saved = self.saved_for_backward(region, tier)
            queue = self.compute_queue(region)
            op = Op(K.Compute, queue, inputs, writes + saved, deps, self.names[region], seconds, declared)
            op.region = region
            compute = self.emit(op, serial=self.on_device[region])
            self.region_of[compute] = region
            self.operands[compute] = (tuple(inputs), tuple(writes))
            if split is not None:
                self.join(region, writes[0], cpu_rows, outputs)
            if mine:
                free = Op(
                    K.Free,
                    CPU_QUEUE,
                    sorted(set(mine.values())),
                    [],
                    {compute},
                    f"free {self.names[region]} weights",
                    0.0,
                )
                self.weight_free[region] = self.emit(free)
        return self.finish(cpu_slots, io_depth, capacities)

    def finish(self, cpu_slots: int, io_depth: int, capacities) -> LoweredProgram:
        runner = self.runner
        on_devices = {slot for slot, written in runner.in_place.items() if written in self.homes}
        updated = [slot for slot, _ in runner.mutations if slot not in on_devices]
        returned = [slot for slot, _ in runner.outputs if slot is not None] + updated
        in_ram = self.values_on(returned, RAM)
        self.kept.update(in_ram.values())
        outputs = tuple((in_ram[slot] if slot is not None else None, constant) for slot, constant in runner.outputs)
        mutations = tuple(in_ram.get(slot) for slot, _ in runner.mutations)
        ops = self.with_frees()
        return self.program(ops, outputs, mutations, cpu_slots, io_depth, capacities)

    def with_frees(self) -> list[tuple[int, Op]]:
        """The ops (with their old ids) and a Free after each last reader of transient buffers."""
        readers: dict[int, list[int]] = defaultdict(list)
        for ident, op in enumerate(self.ops):
            if op.kind != K.Free:
                for buffer in op.reads:
                    readers[buffer].append(ident)
        freed_by_weights = {b for op in self.ops if op.kind == K.Free for b in op.reads}
        last: dict[int, list[int]] = defaultdict(list)
        for buffer, spec in enumerate(self.buffers):
            if spec["lifetime"] != LIFE.Transient or buffer in self.kept or buffer in freed_by_weights:
                continue
            last[max(readers.get(buffer, [self.producer[buffer]]))].append(buffer)
        ordered: list[tuple[int, Op]] = []
        for ident, op in enumerate(self.ops):
            ordered.append((ident, op))
            if ident in last:
                freed = last[ident]
                deps = {self.producer[b] for b in freed} | {r for b in freed for r in readers.get(b, [])}
                label = f"free after {op.label}"
                ordered.append((-1, Op(K.Free, CPU_QUEUE, freed, [], deps, label, 0.0)))
        return ordered

    def program(self, ordered, outputs, mutations, cpu_slots, io_depth, capacities) -> LoweredProgram:
        machine = self.machine
        new_id = {old: new for new, (old, _) in enumerate(ordered) if old >= 0}
        spilled = {b for _, op in ordered if op.kind == K.Spill for b in op.reads}
        views = {}
        for spec in self.buffers:
            buffer, slot = spec["id"], self.value_of.get(spec["id"])
            if buffer in self.producer and self.ops[self.producer[buffer]].kind == K.Compute:
                spec["torch_owned"] = buffer not in spilled or spec["bytes"] == 0
            if spec["tier"] not in (RAM, self.disk_tier):  # a device's memory is its backend's
                spec["torch_owned"] = True
            in_memory = "file" not in spec and spec["tier"] != self.disk_tier
            core_held = not spec.get("torch_owned") and spec["lifetime"] != LIFE.Input and in_memory
            if core_held and buffer not in self.carried and spec["bytes"] > 0:
                views[buffer] = self.view_meta(buffer, slot)
        buffers = [core.Buffer(**spec) for spec in self.buffers]
        instructions = []
        queue_names = machine.queue_names
        for new, (_, op) in enumerate(ordered):
            instructions.append(
                core.Instruction(
                    new,
                    op.kind,
                    region=op.region,
                    device=queue_names[op.queue],
                    label=op.label,
                    deps=sorted(new_id[d] for d in op.deps),
                    queue=op.queue,
                    reads=list(op.reads),
                    writes=list(op.writes),
                    declared_us=op.declared_s * 1e6,
                )
            )
        tier_capacities = list(capacities) if capacities is not None else [UNBOUNDED] * len(machine.tier_names)
        tiers = [
            core.Tier(name, core.TierKind.Host if tier == RAM else core.TierKind.Device, capacity)
            for tier, (name, capacity) in enumerate(zip(machine.tier_names, tier_capacities))
        ]
        files = []
        if self.disk_tier is not None:
            tiers.append(core.Tier("disk", core.TierKind.Disk))
        if self.weights is not None:
            files = [self.file_spec(index) for index in range(len(self.weights.files))]
        links = set(machine.link_names)
        capacity = {"cpu": cpu_slots, "io": io_depth}
        queues = [
            core.Queue(
                name,
                core.QueueKind.Io if name == "io" else core.QueueKind.Link if name in links else core.QueueKind.Compute,
                capacity.get(name, 1),
            )
            for name in queue_names
        ]
        kept = sorted(b for b in self.kept if self.buffers[b]["lifetime"] == LIFE.Transient)
        program = core.Program(tiers, queues, files, buffers, instructions, kept)
        return LoweredProgram(
            program=program,
            seconds=tuple(op.seconds for _, op in ordered),
            prefetch=self.prefetch,
            region_names=tuple(self.names),
            region_of={new_id[old]: region for old, region in self.region_of.items()},
            operands={new_id[old]: operands for old, operands in self.operands.items()},
            preset=tuple(self.preset),
            carried=dict(self.carried),
            views=views,
            outputs=outputs,
            mutations=mutations,
            resident=dict(self.disk_resident),
            streamed={r: tuple(ws) for r, ws in self.disk_streamed.items()},
            parts=dict(self.parts),
            joined=frozenset(new_id[old] for old in self.joined),
            splits=tuple(self.splits[r] for r in sorted(self.splits)),
            homes=dict(self.homes),
        )

    def file_spec(self, index: int) -> core.FileSpec:
        """File `index` as the data plane reads it. A load checks its range's CRC-32C where
        recorded (about 14 GB/s a core from RAM) instead of the SHA-256 of the chunks it covers
        (about 2 GB/s, competing with compute): the SHA-256s verify the file once, when the
        program is built; and it skips even that where its bytes were found good before in
        the file as it is (RangeTrust; a streamed Llama call: 700 ms instead of 840)."""
        file = self.weights.files[index]
        ranges = [r for r in self.weights.ranges.values() if r.file == index]
        if all(r.crc32c >= 0 for r in ranges):
            return core.FileSpec(file.path, file.size, 0, [], file.verified_as)
        return core.FileSpec(file.path, file.size, file.chunk_bytes, list(file.chunk_sha256))

    def view_meta(self, buffer: int, slot: int | None) -> tuple[torch.dtype, tuple[int, ...]]:
        if buffer in self.meta_of:  # a split layer's rows
            return self.meta_of[buffer]
        if slot is None:  # a streamed weight
            place = self.weights.ranges[self.loaded_slot[buffer]]
            return place.dtype, place.shape
        if slot in self.disk_resident and self.weights is not None:
            place = self.weights.ranges[slot]
            return place.dtype, place.shape
        return self.runner.slot_meta[slot]
