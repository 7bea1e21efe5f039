"""Builds the execution plan: devices, the native schedule, and the direct-path decision."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .. import core
from ..config import CompileConfig
from ..environment import env_flag
from ..partition.regions import Region
from .placement import Placement


@dataclass(frozen=True)
class ExecutionPlan:
    """Everything the runtime needs to know about how a compiled module runs.

    schedule is validated by the C++ core and immutable, so calls on several threads share
    it. When direct is true, calls run the single region inline and never touch the
    executor; direct_reason says why the path was or was not taken.
    """

    schedule: core.Schedule
    devices: tuple[str, ...]  # per region
    direct: bool
    direct_reason: str
    max_concurrent: int
    stall_timeout_s: float
    placement: Placement | None = None  # the search, finalists and predictions (None: replayed plan)

    @property
    def tiered(self) -> bool:
        """True when regions run on virtual devices, through transfers between memory tiers."""
        return self.placement is not None and not self.placement.machine.is_cpu_only


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask, not the host's total)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def build_plan(
    regions: list[Region], config: CompileConfig, cpus: int | None = None, placement: Placement | None = None
) -> ExecutionPlan:
    """The executable plan of `placement` (default: every region on the CPU, its weights in
    RAM); `cpus` is the CPU budget (default: the cores this process may run on)."""
    cores = cpus or usable_cores()
    chosen = placement.chosen if placement is not None else None
    devices = tuple(placement.machine.devices[d].name for d in chosen.devices) if chosen else ("cpu",) * len(regions)
    direct, reason = decide_direct_path(
        len(regions), config, on_cpu=all(d == "cpu" for d in devices), resident_on=resident_on(placement)
    )
    if placement is not None and not placement.machine.is_cpu_only:
        schedule = chosen.program.program.schedule  # runs as lowered
    else:
        # A CPU plan keeps its regions as a portable schedule: an artifact saves it, and
        # loading it lowers it again.
        schedule = core.Schedule(region_instructions(regions, chosen.program if chosen else None))
    return ExecutionPlan(
        schedule=schedule,
        devices=devices,
        direct=direct,
        direct_reason=reason,
        max_concurrent=config.max_concurrent_regions or cores,
        stall_timeout_s=float(config.stall_timeout_s),
        placement=placement,
    )


def region_instructions(regions: list[Region], lowered=None) -> list[core.Instruction]:
    """One Compute per region, after the regions it reads, with the times the Compute of
    `lowered` (a LoweredProgram, if any) was simulated at."""
    times = {region.index: (-1.0, -1.0) for region in regions}
    if lowered is not None:
        for i in lowered.program.schedule.instructions:
            if i.id in lowered.region_of:
                times[lowered.region_of[i.id]] = (i.predicted_start_us, i.predicted_end_us)
    return [
        core.Instruction(
            id=region.index,
            kind=core.InstructionKind.Compute,
            region=region.index,
            device="cpu",
            label=region.name,
            deps=region.deps,
            predicted_start_us=times[region.index][0],
            predicted_end_us=times[region.index][1],
        )
        for region in regions
    ]


def resident_on(placement: Placement | None) -> str | None:
    """The accelerator every region of `placement` computes on with its weights resident
    there (none split with the CPU), if there is one: its plan may take the direct path."""
    if placement is None:
        return None
    chosen = placement.chosen
    used = set(chosen.devices)
    if len(used) != 1 or not all(chosen.resident) or chosen.splits:
        return None
    device = placement.machine.devices[used.pop()]
    return device.name if device.measured else None


def decide_direct_path(
    region_count: int, config: CompileConfig, on_cpu: bool = True, resident_on: str | None = None
) -> tuple[bool, str]:
    """Whether calls skip the executor, and why. TT_DIRECT_PATH=0/1 overrides the config.
    `resident_on`: the accelerator every region is resident on, if any."""
    forced = env_flag("TT_DIRECT_PATH")
    if not on_cpu and resident_on is None:
        return False, "not taken: regions run on virtual devices or several devices, through transfers"
    if config.activation_budget_bytes is not None:
        return False, "not taken: CompileConfig.activation_budget_bytes is kept on the data plane"
    if resident_on is not None:
        if forced is False or (not config.prefer_direct_path and forced is None):
            why = "TT_DIRECT_PATH=0" if forced is False else "CompileConfig(prefer_direct_path=False)"
            return False, f"not taken: disabled by {why}"
        return True, f"taken: every region is resident on {resident_on}; calls run there inline"
    if region_count > 1:
        note = " (TT_DIRECT_PATH=1 applies only to a single resident region)" if forced else ""
        return False, f"not taken: {region_count} regions run through the executor by dependency order{note}"
    if forced is False:
        return False, "not taken: disabled by TT_DIRECT_PATH=0"
    if not config.prefer_direct_path and forced is None:
        return False, "not taken: disabled by CompileConfig(prefer_direct_path=False)"
    how = (
        "a single resident region on cpu runs inline, without an executor round trip: "
        "the model's own forward while all its modules are in eval mode, else the captured region"
    )
    return True, f"taken: {how}" + (" (forced by TT_DIRECT_PATH=1)" if forced else "")


def plan_to_json(plan: ExecutionPlan) -> tuple[dict, list[dict]]:
    """The plan and its schedule as JSON-able values, for an artifact's manifest."""
    decisions = {
        "devices": list(plan.devices),
        "direct": plan.direct,
        "direct_reason": plan.direct_reason,
        "max_concurrent": plan.max_concurrent,
        "stall_timeout_s": plan.stall_timeout_s,
    }
    schedule = [
        {
            "id": i.id,
            "kind": i.kind.name.lower(),
            "region": i.region,
            "device": i.device,
            "label": i.label,
            "deps": list(i.deps),
            "predicted_start_us": i.predicted_start_us,
            "predicted_end_us": i.predicted_end_us,
        }
        for i in plan.schedule.instructions
    ]
    return decisions, schedule


def plan_from_json(decisions: dict, schedule: list[dict]) -> ExecutionPlan:
    """The plan plan_to_json described. Raises KeyError/TypeError/ValueError on bad data, and
    ScheduleError when the schedule does not validate."""
    kinds = {name.lower(): kind for name, kind in core.InstructionKind.__members__.items()}
    instructions = [
        core.Instruction(
            id=int(i["id"]),
            kind=kinds[i["kind"]],
            region=int(i["region"]),
            device=str(i["device"]),
            label=str(i["label"]),
            deps=[int(d) for d in i["deps"]],
            predicted_start_us=float(i.get("predicted_start_us", -1.0)),
            predicted_end_us=float(i.get("predicted_end_us", -1.0)),
        )
        for i in schedule
    ]
    return ExecutionPlan(
        schedule=core.Schedule(instructions),
        devices=tuple(str(d) for d in decisions["devices"]),
        direct=bool(decisions["direct"]),
        direct_reason=str(decisions["direct_reason"]),
        max_concurrent=int(decisions["max_concurrent"]),
        stall_timeout_s=float(decisions["stall_timeout_s"]),
    )
