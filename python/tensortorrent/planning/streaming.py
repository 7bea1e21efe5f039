"""Weights streamed from disk under a RAM budget: which regions stream, lowered to the program that runs it.

A region's parameters stream when only that region reads them (a tied weight, a model
output or a mutated buffer stays resident). Residents are loaded once into the core's
resident arena; a streamed region's weights are `Load`ed from their file range into the
call's arena before it computes and freed after it, prefetched as lowering.py says.
The CPU is the one-tier case of the lowering: every region computes there.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import _core
from ..errors import MemoryCapacityError
from ..observe.units import format_bytes
from .activation_spill import ActivationBudgetError
from .lowering import UNBOUNDED, LoweredProgram, lower, simulated_us
from .machine import PlanDevice, PlanMachine
from .weights_on_disk import WeightsOnDisk

__all__ = ["UNBOUNDED", "cpu_program", "in_memory_plan", "plan_streaming"]

CPU_ONLY = PlanMachine((PlanDevice("cpu", None, 0),), UNBOUNDED)


def cpu_program(
    runner,
    names: Sequence[str],
    budget_bytes: int,
    cpu_slots: int,
    weights: WeightsOnDisk | None = None,
    streamed: frozenset[int] = frozenset(),
    prefetch: int = 0,
    io_depth: int = 1,
    seconds: Sequence[float] | None = None,
    activation_budget: int | None = None,
) -> LoweredProgram:
    """The program of every region on the CPU within `budget_bytes` of RAM, activations
    beyond `activation_budget` spilled; `seconds` per region (default 0). Raises
    MemoryCapacityError when its memory plan exceeds the budget."""
    count = len(runner.kernels)
    table = [[seconds[r] if seconds is not None else 0.0] for r in range(count)]
    return lower(
        runner,
        names,
        CPU_ONLY,
        [0] * count,
        [True] * count,
        table,
        prefetch,
        cpu_slots,
        capacities=[budget_bytes],
        weights=weights,
        streamed=streamed,
        io_depth=io_depth,
        activation_budget=activation_budget,
    )


def plan_streaming(
    runner,
    names: Sequence[str],
    weights: WeightsOnDisk,
    budget_bytes: int,
    prefetch: int,
    cpu_slots: int,
    allow_streaming: bool = True,
    activation_budget: int | None = None,
) -> LoweredProgram:
    """Keeps resident what fits in `budget_bytes` and streams the rest, largest regions
    first (with `allow_streaming` False, nothing streams), activations beyond
    `activation_budget` spilled; MemoryCapacityError when even streaming every region (or,
    not allowed, none) does not fit."""
    own = runner.own_weights
    order = sorted(own, key=lambda r: (-sum(weights.ranges[s].nbytes for s in own[r] if s in weights.ranges), r))
    last = None
    for count in range(len(order) + 1 if allow_streaming else 1):
        try:
            streamed = frozenset(order[:count])
            return cpu_program(
                runner, names, budget_bytes, cpu_slots, weights, streamed, prefetch, activation_budget=activation_budget
            )
        except ActivationBudgetError:
            raise  # streaming more weights makes no room for a region's activations
        except MemoryCapacityError as error:
            last = error
    if not allow_streaming:
        raise MemoryCapacityError(
            f"ram_budget_bytes={budget_bytes} ({format_bytes(budget_bytes)}) cannot hold every weight with the "
            f"activations, and CompileConfig.allow_disk_streaming=False keeps them all in RAM ({last})"
        )
    everything = cpu_program(
        runner, names, UNBOUNDED, cpu_slots, weights, frozenset(order), prefetch, activation_budget=activation_budget
    )
    needed = everything.program.memory_plan.arena_bytes[0]
    raise MemoryCapacityError(
        f"ram_budget_bytes={budget_bytes} ({format_bytes(budget_bytes)}) is below the smallest working set this "
        f"model can stream with: {needed} bytes ({format_bytes(needed)}), with every streamable region streamed "
        f"at prefetch distance {prefetch} ({last})"
    )


def in_memory_plan(
    runner, regions, plan, budget_bytes: int | None, activation_budget: int | None = None
) -> LoweredProgram:
    """The program of a CPU plan whose weights stay the model's own tensors: nothing
    streams (activations beyond `activation_budget` spill); the plan's predicted region
    times carry over."""
    lowered = cpu_program(
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
    queues[1] = read_bytes_per_s
    return _core.simulate_program(plan.program, seconds, queue_bytes_per_s=queues)


def with_io_depth(
    plan: LoweredProgram,
    runner,
    weights: WeightsOnDisk,
    cpu_slots: int,
    io_depth: int,
    simulated,
    activation_budget: int | None = None,
):
    """The same program (lowered with the same `activation_budget`) with `io_depth` loads
    in flight, its instructions carrying the simulated start and end times."""
    deeper = cpu_program(
        runner,
        plan.region_names,
        plan.budget_bytes,
        cpu_slots,
        weights,
        frozenset(plan.streamed),
        plan.prefetch,
        io_depth,
        activation_budget=activation_budget,
    )
    return deeper.rebuilt(predicted_us=simulated_us(simulated))
