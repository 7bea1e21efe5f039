"""Weights streamed from disk under a RAM budget: which regions stream, lowered to the program that runs it.

A region's parameters stream when only that region reads them (a tied weight, a model
output or a mutated buffer stays resident). Residents are loaded once into the core's
resident arena; a streamed region's weights are `Load`ed from their file range into the
call's arena before it computes and freed after it, prefetched as lowering.py says.
The CPU is the one-tier case of the lowering: every region computes there.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .. import core
from ..errors import MemoryCapacityError
from ..hardware.device import cpu_device
from ..units import format_bytes
from .activation_spill import ActivationBudgetError
from .lowering import UNBOUNDED, LoweredProgram, lower, simulated_us
from .machine import IO_QUEUE, PlanMachine
from .weights_on_disk import WeightsOnDisk

__all__ = [
    "UNBOUNDED",
    "DiskTier",
    "Layout",
    "choose_disk_tier",
    "in_memory_plan",
    "plan_streaming",
    "streamed_program",
]

CPU_ONLY = PlanMachine((cpu_device(),), UNBOUNDED)


@dataclass(frozen=True)
class Layout:
    """Where each region of a streamed program computes: its device of `machine`, whether
    a region on a virtual device keeps its weights resident there, and its seconds on
    each device. Without one, every region is on the CPU."""

    machine: PlanMachine
    devices: tuple[int, ...]
    resident: tuple[bool, ...]
    compute_s: tuple[tuple[float, ...], ...]

    @staticmethod
    def of_placement(placement) -> Layout:
        chosen = placement.chosen
        return Layout(placement.machine, chosen.devices, chosen.resident, placement.compute_s)

    def on_device(self, region: int) -> bool:
        return not self.machine.devices[self.devices[region]].is_cpu

    def streamable(self, region: int) -> bool:
        """A region resident on its device keeps its weights there: only the others stream."""
        return not (self.on_device(region) and self.resident[region])

    def region_seconds(self, cpu_seconds: Sequence[float]) -> list[float]:
        """Each region's seconds where it computes: `cpu_seconds` for the CPU's regions."""
        return [self.compute_s[r][self.devices[r]] if self.on_device(r) else s for r, s in enumerate(cpu_seconds)]


def streamed_program(
    runner,
    names: Sequence[str],
    budget_bytes: int,
    cpu_slots: int,
    weights: WeightsOnDisk | None = None,
    streamed: frozenset[int] = frozenset(),
    prefetch: int = 0,
    io_depth: int = 1,
    activation_budget: int | None = None,
    layout: Layout | None = None,
    bounded_devices: bool = True,
) -> LoweredProgram:
    """The program of the regions laid out as `layout` says (default: all on the CPU)
    within `budget_bytes` of RAM and (with `bounded_devices`) each device's memory, activations beyond
    `activation_budget` spilled, the regions in `streamed` loading their weights from
    disk on every call. Raises MemoryCapacityError when its memory plan exceeds a
    capacity."""
    count = len(runner.kernels)
    if layout is None:
        layout = Layout(CPU_ONLY, (0,) * count, (True,) * count, ((0.0,),) * count)
    return lower(
        runner,
        names,
        layout.machine,
        layout.devices,
        layout.resident,
        layout.compute_s,
        prefetch,
        cpu_slots,
        capacities=[budget_bytes] + [c if bounded_devices else UNBOUNDED for c in layout.machine.tier_capacities()[1:]],
        weights=weights,
        streamed=streamed,
        io_depth=io_depth,
        activation_budget=activation_budget,
    )


def size_groups(runner, weights: WeightsOnDisk, layout: Layout | None = None) -> list[list[int]]:
    """The regions with bytes of their own on disk that may stream (see Layout.streamable),
    grouped by those bytes, largest first; each group in program order."""
    own = runner.own_weights
    groups: dict[int, list[int]] = defaultdict(list)
    for region in sorted(r for r in own if layout is None or layout.streamable(r)):
        groups[sum(weights.ranges[s].nbytes for s in own[region] if s in weights.ranges)].append(region)
    return [groups[size] for size in sorted(groups, reverse=True) if size > 0]  # nothing to stream in 0 bytes


def streamed_regions(groups: list[list[int]], count: int, spread: bool) -> frozenset[int]:
    """The `count` regions that stream: whole groups, largest first, then part of the next:
    its first ones, or (`spread`) ones spread evenly through it, ending with its last. Spread,
    the resident regions between them compute while the disk reads, and after the last
    load only one region computes."""
    chosen: list[int] = []
    for group in groups:
        take = min(count - len(chosen), len(group))
        if take == len(group) or not spread:
            chosen += group[:take]
        else:
            chosen += [group[(i + 1) * len(group) // take - 1] for i in range(take)]
        if len(chosen) == count:
            break
    return frozenset(chosen)


def plan_streaming(
    runner,
    names: Sequence[str],
    weights: WeightsOnDisk,
    budget_bytes: int,
    prefetch: int,
    cpu_slots: int,
    allow_streaming: bool = True,
    activation_budget: int | None = None,
    spread: bool = True,
    layout: Layout | None = None,
    hold_none: bool = False,
) -> LoweredProgram:
    """Keeps resident what fits in `budget_bytes` and streams the fewest regions that make
    it fit, largest first (see streamed_regions; with `allow_streaming` False, nothing
    streams; with `hold_none`, every region whose weights are on disk streams: the program
    holds none of its own), activations beyond `activation_budget` spilled;
    MemoryCapacityError when even streaming every region (or, not allowed, none) does not fit."""
    groups = size_groups(runner, weights, layout)
    streamable = sum(len(group) for group in groups)
    last = None
    counts = range(streamable, streamable + 1) if hold_none else range(streamable + 1 if allow_streaming else 1)
    for count in counts:
        try:
            streamed = streamed_regions(groups, count, spread)
            return streamed_program(
                runner,
                names,
                budget_bytes,
                cpu_slots,
                weights,
                streamed,
                prefetch,
                activation_budget=activation_budget,
                layout=layout,
            )
        except ActivationBudgetError:
            raise  # streaming more weights makes no room for a region's activations
        except MemoryCapacityError as error:
            # Kept without its traceback: that would hold this frame, and through it the
            # callers' (an I/O engine's threads among their locals), in a cycle until gc.
            last = error.with_traceback(None)
    if not allow_streaming:
        raise MemoryCapacityError(
            f"ram_budget_bytes={budget_bytes} ({format_bytes(budget_bytes)}) cannot hold every weight with the "
            f"activations, and CompileConfig.allow_disk_streaming=False keeps them all in RAM ({last})"
        )
    raise last


def smallest_streamed_ram(
    runner,
    names: Sequence[str],
    weights: WeightsOnDisk,
    cpu_slots: int,
    distances: Sequence[int],
    activation_budget: int | None = None,
    layout: Layout | None = None,
) -> int:
    """The least RAM that any layout choose_disk_tier weighs needs (each prefetch distance
    of `distances`, every count of streamed regions, spread or first): the smallest budget
    with which it finds one. Not always the layout streaming the most: a prefetched load
    holds its buffer while the region before it computes."""
    groups = size_groups(runner, weights, layout)
    streamable = sum(len(group) for group in groups)
    needs = []
    for distance in distances:
        tried: set[frozenset[int]] = set()
        for spread, count in itertools.product((True, False), range(streamable + 1)):
            streamed = streamed_regions(groups, count, spread)
            if streamed in tried:
                continue
            tried.add(streamed)
            every = streamed_program(
                runner,
                names,
                UNBOUNDED,
                cpu_slots,
                weights,
                streamed,
                distance,
                activation_budget=activation_budget,
                layout=layout,
                bounded_devices=False,
            )
            needs.append(every.program.memory_plan.arena_bytes[0])
    return min(needs)


@dataclass(frozen=True)
class DiskTier:
    """The chosen streamed program, the simulator's run of it, and why it was chosen."""

    plan: LoweredProgram
    simulated: object  # the core's simulation of plan.program
    reason: str


def window_reads(plan: LoweredProgram, request_bytes: int) -> int:
    """The requests of `request_bytes` that the plan's loads keep in flight while a streamed
    region computes: the next `prefetch` streamed regions' (the one after them waits for
    this one's Free), counted for its smallest streamed region."""
    if not plan.streamed:
        return UNBOUNDED
    smallest = min(sum(-(-w.nbytes // request_bytes) for w in ws) for ws in plan.streamed.values())
    return plan.prefetch * smallest


def choose_disk_tier(
    runner,
    names: Sequence[str],
    weights: WeightsOnDisk,
    budget_bytes: int,
    cpu_slots: int,
    distances: Sequence[int],
    region_seconds: Sequence[float],
    reads: tuple[float, int, int],
    allow_streaming: bool = True,
    activation_budget: int | None = None,
    layout: Layout | None = None,
    hold_none: bool = False,
) -> DiskTier:
    """Of the layouts that fit `budget_bytes` (each prefetch distance of `distances`, the
    streamed regions of a size spread or first: plan_streaming), the one whose loads keep
    the most of the I/O engine's reads in flight, up to its threads, and then the one the
    simulator runs fastest; on a tie, the first. `reads`: (bytes/s, threads, request
    bytes) of the engine as measured; regions take `region_seconds` on the CPU (and their
    seconds on their device where `layout` puts them on one). The simulator gives a
    load the disk's measured bandwidth however few reads are in flight, but a disk
    reads slower with fewer (and the calibration measured it with all its threads busy).
    `hold_none`: plan_streaming's. Raises the last MemoryCapacityError when none fits."""
    speed, threads, request_bytes = reads
    if layout is not None:
        region_seconds = layout.region_seconds(region_seconds)
    candidates, failure = [], None
    for distance in distances:
        for spread in (True, False):
            try:
                plan = plan_streaming(
                    runner,
                    names,
                    weights,
                    budget_bytes,
                    distance,
                    cpu_slots,
                    allow_streaming,
                    activation_budget,
                    spread=spread,
                    layout=layout,
                    hold_none=hold_none,
                )
            except ActivationBudgetError:
                raise
            except MemoryCapacityError as error:
                failure = error.with_traceback(None)  # no cycle through this frame (see plan_streaming)
                continue
            in_flight = min(window_reads(plan, request_bytes), threads)
            candidates.append((-in_flight, simulate_plan(plan, region_seconds, speed), plan, spread))
    if not candidates:
        if not allow_streaming:
            raise failure
        smallest = smallest_streamed_ram(runner, names, weights, cpu_slots, distances, activation_budget, layout)
        if smallest <= budget_bytes:  # RAM is not what overflows: a device's memory is
            raise MemoryCapacityError(
                f"with the weights streamed within ram_budget_bytes={budget_bytes} ({format_bytes(budget_bytes)}), "
                f"a device of the placement cannot hold its regions' weights and activations ({failure})"
            )
        raise MemoryCapacityError(
            f"ram_budget_bytes={budget_bytes} ({format_bytes(budget_bytes)}) is below the smallest budget this "
            f"model can stream its weights with: {smallest} bytes ({format_bytes(smallest)}) ({failure})",
            smallest_budget_bytes=smallest,
        )
    _, simulated, plan, spread = min(candidates, key=lambda c: (c[0], c[1].makespan_s))
    arrangement = "spread through the program" if spread else "the first of their size"
    streamable = sum(len(group) for group in size_groups(runner, weights, layout))
    reason = (
        f"{len(plan.streamed)} of {streamable} regions with weights streamed, {arrangement}, prefetch distance "
        f"{plan.prefetch}: of {len(candidates)} layout(s) that fit, the fastest as the simulator ran them "
        f"among those keeping the most reads in flight (up to the engine's {threads})"
    )
    return DiskTier(plan, simulated, reason)


def in_memory_plan(
    runner, regions, plan, budget_bytes: int | None, activation_budget: int | None = None
) -> LoweredProgram:
    """The program of a CPU plan whose weights stay the model's own tensors: nothing
    streams (activations beyond `activation_budget` spill); the plan's predicted region
    times carry over. A plan placed on the CPU alone runs the program its placement
    lowered and simulated, where no activation may spill (the placement does not plan
    spills); a replayed artifact's plan, which has no placement, is lowered here."""
    placed = plan.placement.chosen.program if plan.placement is not None else None
    if placed is not None and plan.placement.machine.is_cpu_only and activation_budget is None:
        return placed
    lowered = streamed_program(
        runner,
        [region.name for region in regions],
        budget_bytes if budget_bytes is not None else UNBOUNDED,
        plan.max_concurrent,
        activation_budget=activation_budget,
    )
    predicted = {
        i.region: (i.predicted_start_us, i.predicted_end_us) for i in plan.schedule.instructions if i.region >= 0
    }
    if not predicted:
        return lowered
    times = [(-1.0, -1.0)] * len(lowered.seconds)
    for ident, region in lowered.region_of.items():
        times[ident] = predicted[region]
    return lowered.rebuilt(predicted_us=times)


def simulate_plan(plan: LoweredProgram, region_seconds: Sequence[float], read_bytes_per_s: float):
    """The simulator's run of the plan's program: regions take `region_seconds`, loads
    their bytes at `read_bytes_per_s`, frees no time."""
    seconds = list(plan.seconds)
    for ident, region in plan.region_of.items():
        seconds[ident] = region_seconds[region]
    queues = [0.0] * len(plan.program.queues)
    queues[IO_QUEUE] = read_bytes_per_s
    return core.simulate_program(plan.program, seconds, queue_bytes_per_s=queues)


@dataclass(frozen=True)
class MeasuredCosts:
    region_seconds: tuple[float, ...]  # per region: its compute, as the call ran it
    read_bytes_per_s: float | None  # bytes read over the time some read was in flight; None: nothing read


def call_costs(report, plan: LoweredProgram, regions: int) -> MeasuredCosts:
    """What one call of `plan` took (from its run report): the compute of each of its
    `regions` regions, and its read speed."""
    seconds = [0.0] * regions
    for record in report.records:
        if record.kind == "compute" and record.id in plan.region_of:
            seconds[plan.region_of[record.id]] += (record.end_us - record.start_us) / 1e6
    speed = report.bytes_read / (report.read_us / 1e6) if report.read_us > 0 else None
    return MeasuredCosts(tuple(seconds), speed)


def predicted_at(plan: LoweredProgram, report, regions: int) -> float | None:
    """The simulator's time for `plan` at the compute times and the read speed of the call
    that `report` records: how far the model is off once the disk's own drift between
    compile and call is taken out. None when that call read nothing."""
    measured = call_costs(report, plan, regions)
    if measured.read_bytes_per_s is None:
        return None
    return simulate_plan(plan.timed_as or plan, measured.region_seconds, measured.read_bytes_per_s).makespan_s


def with_io_depth(
    plan: LoweredProgram,
    runner,
    weights: WeightsOnDisk,
    cpu_slots: int,
    io_depth: int,
    simulated,
    activation_budget: int | None = None,
    layout: Layout | None = None,
):
    """The same program (lowered with the same `activation_budget` and `layout`) with
    `io_depth` loads in flight, its instructions carrying the simulated start and end times."""
    deeper = streamed_program(
        runner,
        plan.region_names,
        plan.budget_bytes,
        cpu_slots,
        weights,
        frozenset(plan.streamed),
        plan.prefetch,
        io_depth,
        activation_budget=activation_budget,
        layout=layout,
    )
    return replace(deeper.rebuilt(predicted_us=simulated_us(simulated)), timed_as=plan)
