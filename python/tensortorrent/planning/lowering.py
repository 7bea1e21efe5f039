"""Lowering: a placement (device and residency per region) becomes the steps a call runs.

Steps are region computations and transfers between tiers, with their dependencies, the
value slots they read and write, and their predicted durations. The same steps become
the executor's schedule and the simulator's tasks, so what is simulated is what runs.

Rules, in the order steps are generated (region by region, in topological order):
- a region on a virtual device reads its resident parameters from copies made once at
  build time; the others are streamed from host RAM by one transfer per region, at most
  `prefetch` regions ahead of the region computing on that device (so at most
  prefetch + 1 regions' streamed parameters are held there at once);
- a value needed on another tier is copied once per tier, grouped by the step that made
  it; between two devices it goes through RAM;
- each device computes one region at a time and each link moves one batch at a time,
  in generation order, except the CPU, whose regions run as their inputs allow;
- every copy is freed after its last reader; model outputs come back to RAM.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from .. import _core
from .machine import RAM, PlanMachine


@dataclass(frozen=True)
class Step:
    """One instruction of a lowered plan; `id` is its position."""

    id: int
    kind: str  # "compute" or "transfer"
    region: int  # the region a compute step runs; -1 for transfers
    resource: int  # device index (compute) or link index (transfer)
    resource_name: str
    tier: int  # where the values it writes live
    src_slots: tuple[int, ...]
    dst_slots: tuple[int, ...]
    nbytes: int  # bytes a transfer moves (0 for compute)
    seconds: float  # predicted duration
    declared_s: float  # the runtime makes the step last at least this long (virtual devices, links)
    deps: tuple[int, ...]
    label: str


@dataclass(frozen=True)
class LoweredPlan:
    steps: tuple[Step, ...]
    slot_count: int
    slot_tier: tuple[int, ...]
    slot_bytes: tuple[int, ...]
    aliases: tuple[tuple[int, int], ...]  # (slot on a device, bound slot): resident parameters
    readers: tuple[int, ...]  # per slot: steps that read it
    freeable: tuple[bool, ...]  # per slot: freed after its last reader
    outputs: tuple[tuple[int | None, object], ...]  # per model output: (slot in RAM, constant)
    mutations: tuple[tuple[int, object], ...]  # (slot in RAM, buffer to update)
    initial_bytes: tuple[int, ...]  # per tier, held before a call starts
    prefetch: int  # streamed regions loaded ahead of the one computing, per device

    def instructions(self, predicted: _core.SimResult | None = None) -> list[_core.Instruction]:
        kinds = {"compute": _core.InstructionKind.Compute, "transfer": _core.InstructionKind.Transfer}
        timed = {}
        if predicted is not None:
            timed = {
                step.id: {"predicted_start_us": start * 1e6, "predicted_end_us": end * 1e6}
                for step, start, end in zip(self.steps, predicted.start_s, predicted.end_s)
            }
        return [
            _core.Instruction(
                id=step.id,
                kind=kinds[step.kind],
                region=step.region,
                device=step.resource_name,
                label=step.label,
                deps=list(step.deps),
                **timed.get(step.id, {}),
            )
            for step in self.steps
        ]

    def sim_tasks(self) -> list[_core.SimTask]:
        """The steps as simulator tasks: memory taken when a step starts, given back when
        the last reader of a value (in generation order) ends."""
        last_reader = {}
        for step in self.steps:
            for slot in step.src_slots:
                last_reader[slot] = step.id
        releases: dict[int, list[_core.MemoryEffect]] = defaultdict(list)
        for step in self.steps:
            for slot in step.dst_slots:
                if self.freeable[slot]:
                    when = last_reader.get(slot, step.id)
                    releases[when].append(_core.MemoryEffect(self.slot_tier[slot], self.slot_bytes[slot]))
        kinds = {"compute": _core.SimTaskKind.Compute, "transfer": _core.SimTaskKind.Transfer}
        return [
            _core.SimTask(
                id=step.id,
                kind=kinds[step.kind],
                resource=step.resource,
                seconds=step.seconds if step.kind == "compute" else 0.0,
                bytes=step.nbytes,
                deps=list(step.deps),
                allocate_at_start=[_core.MemoryEffect(step.tier, self.slot_bytes[s]) for s in step.dst_slots],
                release_at_end=releases.get(step.id, []),
                label=step.label,
            )
            for step in self.steps
        ]


def lower(
    runner,
    region_names: Sequence[str],
    machine: PlanMachine,
    devices: Sequence[int],
    resident: Sequence[bool],
    compute_s: Sequence[Sequence[float]],
    prefetch: int = 1,
) -> LoweredPlan:
    """The steps of the placement `devices`/`resident` (per region) of `runner`'s program;
    compute_s[region][device] is a region's predicted time on each device; `prefetch` is 0
    (load a region's streamed parameters once the previous streamed region has computed)
    or 1 (one region ahead, overlapping its transfer with the previous computation)."""
    return _Lowering(runner, region_names, machine, devices, resident, compute_s, prefetch).run()


class _Lowering:
    def __init__(self, runner, region_names, machine, devices, resident, compute_s, prefetch) -> None:
        self.runner, self.names, self.machine = runner, region_names, machine
        self.devices, self.resident, self.compute_s = devices, resident, compute_s
        self.prefetch = prefetch
        self.slot_tier = [RAM] * runner.slot_count
        self.slot_bytes = list(runner.slot_bytes)
        self.producer: dict[int, int] = {}  # slot -> step that writes it
        self.copies: dict[tuple[int, int], int] = {}  # (slot, tier) -> slot holding a copy there
        self.steps: list[Step] = []
        self.last_on_resource: dict[tuple[str, int], int] = {}  # serial queues: ("device"|"link", index)
        self.aliases: list[tuple[int, int]] = []
        self.pinned: set[int] = set()  # slots never freed

    def new_slot(self, tier: int, nbytes: int) -> int:
        self.slot_tier.append(tier)
        self.slot_bytes.append(nbytes)
        return len(self.slot_tier) - 1

    def tier_of_device(self, device: int) -> int:
        return self.machine.devices[device].tier

    def emit(self, **fields) -> int:
        step = Step(id=len(self.steps), **fields)
        self.steps.append(step)
        for slot in step.dst_slots:
            self.producer[slot] = step.id
        return step.id

    def queue_after(self, queue: tuple[str, int], deps: set[int]) -> tuple[int, ...]:
        """deps, plus the previous step of the same serial queue."""
        previous = self.last_on_resource.get(queue)
        if previous is not None:
            deps = deps | {previous}
        return tuple(sorted(deps))

    def transfer(self, sources: list[int], to_tier: int, deps: set[int], label: str) -> list[int]:
        from_tier = self.slot_tier[sources[0]]
        link = self.machine.link(from_tier, to_tier)
        copies = [self.new_slot(to_tier, self.slot_bytes[s]) for s in sources]
        nbytes = sum(self.slot_bytes[s] for s in sources)
        seconds = self.machine.link_seconds(link, nbytes)
        step = self.emit(
            kind="transfer",
            region=-1,
            resource=link,
            resource_name=self.machine.link_names[link],
            tier=to_tier,
            src_slots=tuple(sources),
            dst_slots=tuple(copies),
            nbytes=nbytes,
            seconds=seconds,
            declared_s=seconds,
            deps=self.queue_after(("link", link), deps),
            label=f"{label} -> {self.machine.tier_names[to_tier]}",
        )
        self.last_on_resource[("link", link)] = step
        return copies

    def copies_on(self, slots: list[int], tier: int) -> dict[int, int]:
        """Each slot's value on `tier`, copying what is not there yet (through RAM between devices)."""
        found, missing = {}, []
        for slot in dict.fromkeys(slots):
            if self.slot_tier[slot] == tier:
                found[slot] = slot
            elif (slot, tier) in self.copies:
                found[slot] = self.copies[(slot, tier)]
            else:
                missing.append(slot)
        if not missing:
            return found
        through_ram = [s for s in missing if tier != RAM and self.slot_tier[s] != RAM]
        in_ram = self.copies_on(through_ram, RAM) if through_ram else {}
        groups: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
        for slot in missing:
            source = in_ram.get(slot, slot)
            groups[(self.producer.get(source, -1), self.slot_tier[source])].append((slot, source))
        for (producer, _), members in sorted(groups.items()):
            origin = self.steps[producer].label.split(" -> ")[0] if producer >= 0 else "inputs"
            label = f"{origin} out" if producer >= 0 and self.steps[producer].kind == "compute" else origin
            copies = self.transfer([s for _, s in members], tier, {producer} - {-1}, label)
            for (slot, _), copy in zip(members, copies):
                self.copies[(slot, tier)] = copy
                found[slot] = copy
        return found

    def run(self) -> LoweredPlan:
        runner, machine = self.runner, self.machine
        bound = set(range(runner.bound_count))
        on_virtual = [machine.devices[d].virtual is not None for d in self.devices]
        # Resident parameters: one copy per device, made at build time.
        alias_of: dict[tuple[int, int], int] = {}
        for region, kernel in enumerate(runner.kernels):
            if on_virtual[region] and self.resident[region]:
                tier = self.tier_of_device(self.devices[region])
                for slot in kernel.in_slots:
                    if slot in bound and (slot, tier) not in alias_of:
                        alias_of[(slot, tier)] = self.new_slot(tier, self.slot_bytes[slot])
                        self.aliases.append((alias_of[(slot, tier)], slot))
        self.pinned.update(alias_of.values())

        streamed: dict[int, list[int]] = defaultdict(list)  # device -> its streamed regions, in order
        for region in range(len(runner.kernels)):
            if on_virtual[region] and not self.resident[region]:
                if any(
                    s in bound and (s, self.tier_of_device(self.devices[region])) not in alias_of
                    for s in runner.kernels[region].in_slots
                ):
                    streamed[self.devices[region]].append(region)
        stream_slots: dict[int, dict[int, int]] = {}  # region -> bound slot -> its streamed copy
        computed: dict[int, int] = {}  # region -> its compute step

        def stream(region: int) -> None:
            if region in stream_slots:
                return
            device = self.devices[region]
            tier = self.tier_of_device(device)
            order = streamed[device]
            k = order.index(region)
            # Wait until the streamed region `prefetch` + 1 places back has computed.
            back = k - 1 - self.prefetch
            deps = {computed[order[back]]} if back >= 0 and order[back] in computed else set()
            params = [
                s for s in dict.fromkeys(runner.kernels[region].in_slots) if s in bound and (s, tier) not in alias_of
            ]
            copies = self.transfer(params, tier, deps, f"{self.names[region]} params")
            stream_slots[region] = dict(zip(params, copies))

        for region, kernel in enumerate(runner.kernels):
            device = self.devices[region]
            tier = self.tier_of_device(device)
            if region in (order := streamed.get(device, [])):
                stream(region)
            values = [s for s in kernel.in_slots if s not in bound]
            placed = self.copies_on(values, tier)
            inputs = []
            for slot in kernel.in_slots:
                if slot not in bound:
                    inputs.append(placed[slot])
                elif tier == RAM:
                    inputs.append(slot)
                else:
                    inputs.append(alias_of.get((slot, tier)) or stream_slots[region][slot])
            outputs = list(kernel.out_slots)
            for slot in outputs:
                self.slot_tier[slot] = tier
            deps = {self.producer[s] for s in inputs if s in self.producer}
            queue = ("device", device)
            seconds = float(self.compute_s[region][device])
            plan_device = machine.devices[device]
            step = self.emit(
                kind="compute",
                region=region,
                resource=device,
                resource_name=plan_device.name,
                tier=tier,
                src_slots=tuple(inputs),
                dst_slots=tuple(outputs),
                nbytes=0,
                seconds=seconds,
                declared_s=seconds if plan_device.virtual is not None else 0.0,
                # The CPU runs as many regions at once as it has workers; a device, one.
                deps=self.queue_after(queue, deps) if plan_device.virtual is not None else tuple(sorted(deps)),
                label=self.names[region],
            )
            computed[region] = step
            if plan_device.virtual is not None:
                self.last_on_resource[queue] = step
            if region in order and order.index(region) + 1 < len(order):
                stream(order[order.index(region) + 1])

        return self.finish(bound)

    def finish(self, bound: set[int]) -> LoweredPlan:
        runner = self.runner
        returned = [slot for slot, _ in runner.outputs if slot is not None] + [slot for slot, _ in runner.mutations]
        in_ram = self.copies_on(returned, RAM)
        outputs = tuple((in_ram[slot] if slot is not None else None, constant) for slot, constant in runner.outputs)
        mutations = tuple((in_ram[slot], buffer) for slot, buffer in runner.mutations)
        inputs = {slot for slot in range(runner.slot_count) if slot not in self.producer}  # weights, user inputs
        kept = self.pinned | bound | inputs | set(in_ram.values())
        readers = [0] * len(self.slot_tier)
        for step in self.steps:
            for slot in step.src_slots:
                readers[slot] += 1
        initial = [0] * len(self.machine.tier_names)
        initial[RAM] = sum(self.slot_bytes[slot] for slot in inputs)
        for alias, _ in self.aliases:
            initial[self.slot_tier[alias]] += self.slot_bytes[alias]
        return LoweredPlan(
            steps=tuple(self.steps),
            slot_count=len(self.slot_tier),
            slot_tier=tuple(self.slot_tier),
            slot_bytes=tuple(self.slot_bytes),
            aliases=tuple(self.aliases),
            readers=tuple(readers),
            freeable=tuple(slot not in kept for slot in range(len(self.slot_tier))),
            outputs=outputs,
            mutations=mutations,
            initial_bytes=tuple(initial),
            prefetch=self.prefetch,
        )
