"""Placement: which device each region computes on and which parameters stay resident.

The native search proposes finalists on its fast list-schedule estimate; each finalist is
lowered to the Program it would really run and simulated (queue contention, prefetch
overlap, memory over time), and the simulator's figures rank them under the objective.
A finalist whose memory plan overflows a tier is never chosen. The chosen one's Program,
with the tiers' real capacities and the simulated times, is the one that runs.

A training plan keeps no weights resident on a device with memory of its own (a GPU):
the optimizer updates the parameters in RAM, so each call copies them to the device,
and backward sends their gradients back over the same link (runtime/autograd_copies.py).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .. import core
from ..errors import PlanningError
from ..objective import ObjectiveFunction, PlanMeasures
from ..partition import Region
from ..units import format_bytes
from .costs import RegionCost
from .layer_split import LayerSplit, device_rows, splittable_layers
from .lowering import LoweredProgram, lower, simulated_us
from .machine import RAM, PlanMachine

UNLIMITED_BYTES = 1 << 62  # the CPU's residency room: its weights are in RAM already


@dataclass(frozen=True)
class Candidate:
    """One placement, lowered and simulated."""

    devices: tuple[int, ...]
    resident: tuple[bool, ...]
    program: LoweredProgram
    simulated: core.ProgramSimResult
    measures: PlanMeasures
    value: float
    over_capacity: tuple[str, ...]  # tiers whose memory plan exceeds their capacity
    splits: tuple[LayerSplit, ...] = ()  # layers the CPU and their device share


@dataclass(frozen=True)
class Placement:
    machine: PlanMachine
    objective: ObjectiveFunction
    compute_s: tuple[tuple[float, ...], ...]  # [region][device] predicted seconds; inf = cannot run there
    finalists: tuple[Candidate, ...]  # ranked, the chosen one first
    searched: bool  # False when a single device made the search unnecessary

    @property
    def chosen(self) -> Candidate:
        return self.finalists[0]


def region_param_bytes(runner, region: int) -> int:
    bound = runner.bound_count
    return sum(runner.slot_bytes[s] for s in set(runner.kernels[region].in_slots) if s < bound)


def region_working_bytes(runner, region: int) -> int:
    """Activations a region holds while it computes: what it reads and what it writes."""
    kernel = runner.kernels[region]
    bound = runner.bound_count
    reads = sum(runner.slot_bytes[s] for s in set(kernel.in_slots) if s >= bound)
    return reads + sum(runner.slot_bytes[s] for s in kernel.out_slots)


def compute_table(runner, costs: Sequence[RegionCost], machine: PlanMachine) -> list[list[float]]:
    """Predicted seconds of each region on each device; inf where its parameters and
    activations cannot fit the device's memory at all."""
    table = []
    for region, cost in enumerate(costs):
        params, working = region_param_bytes(runner, region), region_working_bytes(runner, region)
        row = []
        for device in machine.devices:
            if not device.is_cpu and params + working > device.memory_bytes:
                row.append(math.inf)
            else:
                row.append(device.compute_seconds(region, cost.cpu_seconds or 0.0, cost.flops, params + working))
        table.append(row)
    return table


class PlacementContext:
    """Everything needed to value placements of one program on one machine."""

    def __init__(
        self,
        runner,
        regions: Sequence[Region],
        costs: Sequence[RegionCost],
        machine: PlanMachine,
        objective: ObjectiveFunction,
        cpu_slots: int = 1,
        training: bool = False,
    ) -> None:
        self.runner, self.machine, self.objective, self.cpu_slots = runner, machine, objective, cpu_slots
        self.names = [r.name for r in regions]
        self.regions = regions
        self.table = compute_table(runner, costs, machine)
        # Per device, whether the plan may make parameters resident there: not the CPU (they
        # are in RAM already), nor, in a training plan, a device with memory of its own.
        self.may_hold = tuple(not d.is_cpu and not (training and d.own_memory) for d in machine.devices)
        _check_every_region_runs_somewhere(runner, regions, self.table, machine)
        self.problem = _problem(runner, regions, costs, self.table, machine, self.may_hold)
        self.simulated: dict[tuple, Candidate] = {}  # (devices, resident) -> its candidate

    def weights(self) -> core.ObjectiveWeights:
        """The objective as the native search's weights."""
        weights = self.objective.weights
        return core.ObjectiveWeights(
            latency=weights["latency"],
            bottleneck=weights["throughput"],
            traffic_per_byte=weights["memory"] * self.objective.seconds_per_traffic_byte,
        )

    def value(self, devices: Sequence[int], resident: Sequence[bool]) -> float:
        """The simulated objective of a placement; inf when it overflows a tier."""
        candidate = self.simulate(tuple(devices), tuple(resident))
        return math.inf if candidate.over_capacity else candidate.value

    def with_residency(self, devices: tuple[int, ...]) -> Candidate:
        """The placement `devices` with residency by the rule, simulated."""
        return self.simulate(devices, tuple(core.assign_residency(self.problem, list(devices)).resident))

    def simulate(
        self, devices: tuple[int, ...], resident: tuple[bool, ...], splits: tuple[LayerSplit, ...] = ()
    ) -> Candidate:
        """The placement lowered to its program, simulated and valued (each placement once)."""
        key = (devices, resident, splits)
        if key not in self.simulated:
            self.simulated[key] = self._simulate(devices, resident, splits)
        return self.simulated[key]

    def _simulate(self, devices, resident, splits) -> Candidate:
        """Prefetching one streamed region ahead, unless only loading them one by one fits."""
        ahead = self._simulate_with(devices, resident, splits, prefetch=1)
        if not ahead.over_capacity or all(resident):
            return ahead
        one_by_one = self._simulate_with(devices, resident, splits, prefetch=0)
        return ahead if one_by_one.over_capacity else one_by_one

    def _simulate_with(self, devices, resident, splits=(), prefetch: int = 1) -> Candidate:
        lowered = lower(
            self.runner,
            self.names,
            self.machine,
            devices,
            resident,
            self.table,
            prefetch,
            self.cpu_slots,
            splits=splits,
        )
        result = core.simulate_program(lowered.program, list(lowered.seconds))
        measures = PlanMeasures(
            latency_s=result.makespan_s,
            bottleneck_s=max(result.busy_s, default=0.0),
            traffic_bytes=sum(result.bytes_moved),
        )
        capacities = self.machine.tier_capacities()
        over = tuple(
            name
            for name, needed, allowed in zip(self.machine.tier_names, result.arena_bytes, capacities)
            if needed > allowed
        )
        value = self.objective.value(measures)
        return Candidate(devices, resident, lowered, result, measures, value, over, splits)


# Graphs up to this many region x device pairs are searched with the simulator as the
# objective itself (about a millisecond per placement valued); larger ones with the native
# list-schedule estimate, whose finalists are then simulated and improved by single moves.
SIMULATED_SEARCH_LIMIT = 48
REFINE_SIMULATIONS = 300
FINALISTS = 4  # placements explain() shows, best first


def place(
    runner,
    regions: Sequence[Region],
    costs: Sequence[RegionCost],
    machine: PlanMachine,
    objective: ObjectiveFunction,
    threads: int = 1,
    cpu_slots: int = 1,
    training: bool = False,
) -> Placement:
    """The best placement of `regions` on `machine` under `objective`, with its finalists;
    the CPU runs up to `cpu_slots` regions at once; `training`: a training program's.
    Raises PlanningError when no placement fits."""
    context = PlacementContext(runner, regions, costs, machine, objective, cpu_slots, training)
    searched = len(machine.devices) > 1
    if not searched:
        context.with_residency((0,) * len(regions))
    else:
        search = core.SearchOptions(threads=max(1, threads), weights=context.weights())
        for found in core.search_placement(context.problem, search).finalists:
            context.simulate(tuple(found.device), tuple(found.resident))
        if len(regions) * len(machine.devices) <= SIMULATED_SEARCH_LIMIT:
            core.search_placement(context.problem, core.SearchOptions(threads=1), evaluator=context.value)
        _refine(context, REFINE_SIMULATIONS)
    _fill_residency(context, starts=3)
    _split_layers(context, starts=3)
    ranked = sorted(context.simulated.values(), key=rank_key)
    if ranked[0].over_capacity:
        _raise_overflow(ranked[0], machine)
    best = ranked[0]
    program = best.program.rebuilt(machine.tier_capacities(), simulated_us(best.simulated))
    table = tuple(tuple(row) for row in context.table)
    finalists = (replace(best, program=program), *ranked[1:FINALISTS])
    return Placement(machine, objective, table, finalists, searched=searched)


def _refine(context: PlacementContext, budget: int, starts: int = 3) -> None:
    """Moves runs of one to three consecutive regions to another device while the simulated
    value improves, from each of the `starts` best placements simulated so far, within
    `budget` new simulations in all. Runs reach plans where a lone move would first add a
    transfer and only the next one would remove it."""
    limit = len(context.simulated) + budget
    ranked = sorted(context.simulated.values(), key=rank_key)
    count, devices = len(context.names), range(len(context.machine.devices))
    for best in ranked[:starts]:
        improved = True
        while improved and len(context.simulated) < limit:
            improved = False
            for length, first, device in itertools.product((1, 2, 3), range(count), devices):
                run = range(first, min(first + length, count))
                if len(run) < length or all(best.devices[r] == device for r in run):
                    continue
                if any(math.isinf(context.table[r][device]) for r in run):
                    continue
                moved = context.with_residency(
                    best.devices[:first] + (device,) * length + best.devices[first + length :]
                )
                if not moved.over_capacity and (best.over_capacity or moved.value < best.value * (1 - 1e-9)):
                    best, improved = moved, True
                if len(context.simulated) >= limit:
                    return


def rank_key(candidate: Candidate) -> tuple:
    """Fitting placements first, then by value; at equal value, fewer bytes moved."""
    return (bool(candidate.over_capacity), candidate.value, candidate.measures.traffic_bytes, candidate.devices)


def _fill_residency(context: PlacementContext, starts: int) -> None:
    """Makes more parameter groups resident where the simulated memory shows room.

    The residency rule keeps room for streaming the two largest groups, which is too much
    when those end up resident themselves; the simulator knows the real peaks. From each
    of the `starts` best placements, every streamed group, largest first, becomes resident
    if the placement then still fits and is no worse."""
    param_bytes = [region_param_bytes(context.runner, r) for r in range(len(context.names))]
    ranked = sorted(context.simulated.values(), key=rank_key)
    for best in ranked[:starts]:
        if best.over_capacity:
            continue
        streamed = [
            r
            for r in sorted(range(len(best.resident)), key=lambda r: -param_bytes[r])
            if not best.resident[r] and context.may_hold[best.devices[r]]
        ]
        for region in streamed:
            resident = best.resident[:region] + (True,) + best.resident[region + 1 :]
            trial = context.simulate(best.devices, resident)
            if rank_key(trial) < rank_key(best):
                best = trial


def _split_layers(context: PlacementContext, starts: int) -> None:
    """Tries sharing the layers that the best placements copy to a device, or compute on the
    CPU, between the CPU and the device (planning/layer_split.py), each in the ratio that
    equalises the two sides; the simulator judges each variant against the unsplit one."""
    machine, runner = context.machine, context.runner
    cpu = machine.cpu_index
    layers = splittable_layers(runner, context.regions)
    if cpu is None or not layers or machine.is_cpu_only:
        return
    ranked = sorted(context.simulated.values(), key=rank_key)
    accelerators = [i for i, d in enumerate(machine.devices) if not d.is_cpu]
    for best in [c for c in ranked[:starts] if not c.over_capacity]:
        variants = [(best.devices, best.resident)]
        for device in accelerators:  # the CPU's layers moved to the device, to be split there
            devices, resident = list(best.devices), list(best.resident)
            for region in layers:
                if devices[region] == cpu and not math.isinf(context.table[region][device]):
                    devices[region], resident[region] = device, False
            variants.append((tuple(devices), tuple(resident)))
        for devices, resident in dict.fromkeys(variants):
            splits = _splits_of(context, layers, devices, resident, cpu)
            if splits:
                context.simulate(devices, resident, splits)


def _splits_of(context, layers, devices, resident, cpu: int) -> tuple[LayerSplit, ...]:
    """The splits of the layers a placement copies to a device, where the equal-time share
    leaves both sides some rows."""
    machine, runner, splits = context.machine, context.runner, []
    for region, layer in layers.items():
        device = machine.devices[devices[region]]
        if device.is_cpu or resident[region]:
            continue
        link_s = machine.to_device_seconds(device.tier, region_param_bytes(runner, region))
        overhead_s = machine.to_device_seconds(device.tier, region_working_bytes(runner, region))
        rows = device_rows(
            layer, context.table[region][cpu], context.table[region][devices[region]], link_s, overhead_s
        )
        if rows:
            splits.append(LayerSplit(layer, rows))
    return tuple(splits)


def _resident_room(runner, memory_bytes: int, regions) -> int:
    """Room for resident parameters on a device: its memory less what streaming two regions'
    parameters at once (prefetching) and the largest region's activations may need."""
    params = sorted((region_param_bytes(runner, r) for r in regions), reverse=True)
    working = max((region_working_bytes(runner, r) for r in regions), default=0)
    return max(0, memory_bytes - sum(params[:2]) - 2 * working)


def _problem(runner, regions, costs, table, machine: PlanMachine, may_hold: tuple[bool, ...]) -> core.PlacementProblem:
    count = len(regions)
    devices = []
    for device, holds in zip(machine.devices, may_hold):
        if device.is_cpu:
            room = UNLIMITED_BYTES
        else:
            room = _resident_room(runner, device.memory_bytes, range(count)) if holds else 0
        devices.append(core.PlacementDevice(name=device.name, capacity_bytes=room))
    per_byte = [0.0 if d.is_cpu else 1.0 / d.link_bandwidth for d in machine.devices]
    transfer = [
        [_transfer_s_per_byte(machine, a, b, per_byte) for b in range(len(devices))] for a in range(len(devices))
    ]
    placement_regions = [
        core.PlacementRegion(
            id=region.index,
            deps=list(region.deps),
            compute_s=list(table[region.index]),
            param_bytes=region_param_bytes(runner, region.index),
            output_bytes=cost.output_bytes,
        )
        for region, cost in zip(regions, costs)
    ]
    return core.PlacementProblem(placement_regions, devices, transfer, per_byte)


def _transfer_s_per_byte(machine: PlanMachine, a: int, b: int, host_per_byte: list[float]) -> float:
    """Seconds per byte from device a to device b: over their peer link, else through RAM."""
    if a == b:
        return 0.0
    peer = machine.devices[a].peer_bandwidth(machine.devices[b])
    return 1.0 / peer if peer is not None else host_per_byte[a] + host_per_byte[b]


def _check_every_region_runs_somewhere(runner, regions, table, machine: PlanMachine) -> None:
    for region in regions:
        if all(math.isinf(s) for s in table[region.index]):
            largest = max(machine.on_devices, key=lambda d: d.memory_bytes)
            needed = region_param_bytes(runner, region.index) + region_working_bytes(runner, region.index)
            allowed = largest.memory_bytes
            raise PlanningError(
                f"no device can run region {region.name}: it needs {needed} bytes ({format_bytes(needed)}: "
                f"parameters and activations) in one device's memory, and the largest, {largest.name}, "
                f"allows {allowed} bytes ({format_bytes(allowed)})",
                tier=largest.name,
                needed_bytes=needed,
                allowed_bytes=allowed,
            )


def _raise_overflow(candidate: Candidate, machine: PlanMachine) -> None:
    tier = machine.tier_names.index(candidate.over_capacity[0])
    needed = candidate.simulated.arena_bytes[tier]
    allowed = machine.tier_capacities()[tier]
    what = "host RAM" if tier == RAM else f"device {machine.tier_names[tier]}"
    raise PlanningError(
        f"no plan fits {what}: the best plan found needs {needed} bytes ({format_bytes(needed)}) there "
        f"(its memory plan, which bounds every run order), and its budget allows {allowed} bytes "
        f"({format_bytes(allowed)})",
        tier=machine.tier_names[tier],
        needed_bytes=needed,
        allowed_bytes=allowed,
    )
