"""The data of compiled.visualize()'s page, as plain dicts: the plan's predicted timeline per
queue, the last call's measured records, memory per tier over the predicted time, and the
regions. Kept apart from the HTML (observe/plan_page.py) so that each can be read alone."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import core
from ..partition import Region
from ..planning import ExecutionPlan
from ..planning.costs import RegionCost


@dataclass(frozen=True)
class PlanSources:
    """What the page is drawn from, as a CompiledModule holds it."""

    model_name: str
    plan: ExecutionPlan
    program: core.Program | None  # the data plane's Program; None on the direct path
    regions: Sequence[Region]
    costs: Sequence[RegionCost]


def kind_name(kind: core.InstructionKind) -> str:
    """An instruction kind as the run report spells it ("compute", "load", ...)."""
    return kind.name.lower()


def page_data(sources: PlanSources, report: core.RunReport | None, peaks: dict[str, int]) -> dict[str, Any]:
    """Everything the page shows, from the plan, the last call's `report` (None before any)
    and its measured per-tier `peaks`."""
    program = sources.program
    instructions = program.schedule.instructions if program is not None else sources.plan.schedule.instructions
    predicted = _predicted_bars(instructions, program)
    measured = _measured_bars(report, predicted) if report is not None else None
    # The memory curve needs buffers: the data plane's Program, or on the direct path the
    # Program the placement lowered and simulated (a replayed plan has none).
    placement = sources.plan.placement
    memory_program = program if program is not None else placement.chosen.program.program if placement else None
    return {
        "model": sources.model_name,
        "direct": program is None,
        "direct_reason": sources.plan.direct_reason,
        "lanes": _lanes(predicted, program),
        "predicted": predicted,
        "measured": measured,
        "wall_us": report.wall_us if report is not None else None,
        "kinds": _kind_rows(predicted, measured),
        "regions": _region_rows(sources, predicted, measured),
        "memory": _memory(memory_program, peaks) if memory_program is not None else [],
    }


def _predicted_bars(instructions: Sequence[core.Instruction], program: core.Program | None) -> list[dict]:
    """One bar per instruction, on its queue's lane, at its predicted times (see _times)."""
    queues = [q.name for q in program.queues] if program is not None else []
    bars = []
    for i, (start, end, derived) in zip(instructions, _times(instructions)):
        lane = queues[i.queue] if 0 <= i.queue < len(queues) else i.device
        bars.append(
            {
                "id": i.id,
                "label": i.label,
                "kind": kind_name(i.kind),
                "lane": lane,
                "region": i.region,
                "start": start,
                "end": end,
                "derived": derived,
            }
        )
    return bars


def _times(instructions: Sequence[core.Instruction]) -> list[tuple[float, float, bool]]:
    """Per instruction (start_us, end_us, derived): its predicted times, or where it carries
    none (a CPU plan's Free) the end of its latest dependency, for a zero-length bar."""
    position = {i.id: p for p, i in enumerate(instructions)}
    times: list[tuple[float, float, bool] | None] = [None] * len(instructions)

    def time_of(p: int) -> tuple[float, float, bool]:
        # Iterative over the dependencies not timed yet, so deep chains cannot exhaust the stack.
        pending = [p]
        while pending:
            top = instructions[pending[-1]]
            untimed = [position[d] for d in top.deps if times[position[d]] is None]
            if top.predicted_end_us < 0 and untimed:
                pending.extend(untimed)
                continue
            pending.pop()
            if top.predicted_end_us >= 0:
                times[position[top.id]] = (top.predicted_start_us, top.predicted_end_us, False)
            else:
                at = max((times[position[d]][1] for d in top.deps), default=0.0)
                times[position[top.id]] = (at, at, True)
        return times[p]

    return [time_of(p) for p in range(len(instructions))]


def _measured_bars(report: core.RunReport, predicted: list[dict]) -> list[dict]:
    """The last call's records that ran, each on the lane of its instruction."""
    lane_of = {bar["id"]: bar["lane"] for bar in predicted}
    return [
        {
            "id": r.id,
            "label": r.label,
            "kind": r.kind,
            "lane": lane_of.get(r.id, r.device),
            "start": r.start_us,
            "end": r.end_us,
            "worker": r.worker,
        }
        for r in report.records
        if r.ran
    ]


def _lanes(predicted: list[dict], program: core.Program | None) -> list[str]:
    """The queues the plan uses, in the Program's queue order (cpu, io, then each device's)."""
    used = {bar["lane"] for bar in predicted}
    order = [q.name for q in program.queues] if program is not None else []
    return [q for q in order if q in used] + sorted(used - set(order))


def _kind_rows(predicted: list[dict], measured: list[dict] | None) -> list[dict]:
    """Per instruction kind: how many, and their summed predicted and measured durations."""
    rows: dict[str, dict] = {}
    for source, bars in (("predicted_us", predicted), ("measured_us", measured or [])):
        for bar in bars:
            row = rows.setdefault(bar["kind"], {"kind": bar["kind"], "count": 0, "predicted_us": 0.0})
            row["count"] += source == "predicted_us"
            row[source] = row.get(source, 0.0) + bar["end"] - bar["start"]
    for row in rows.values():
        row.setdefault("measured_us", None if measured is None else 0.0)
    return list(rows.values())


def _region_rows(sources: PlanSources, predicted: list[dict], measured: list[dict] | None) -> list[dict]:
    """Per region: its device and costs, and the span of its compute instructions (predicted
    and in the last call): from the first one's start to the last one's end."""
    region_of = {bar["id"]: bar["region"] for bar in predicted if bar["kind"] == "compute"}
    predicted_spans = _spans((region_of[bar["id"]], bar) for bar in predicted if bar["id"] in region_of)
    measured_spans = _spans((region_of[bar["id"]], bar) for bar in measured or [] if bar["id"] in region_of)
    return [
        {
            "name": region.name,
            "device": device,
            "flops": cost.flops,
            "parameter_bytes": region.parameter_bytes,
            "profiled_us": cost.cpu_seconds * 1e6 if cost.cpu_seconds is not None else None,
            "predicted_us": predicted_spans.get(region.index),
            "measured_us": measured_spans.get(region.index) if measured is not None else None,
        }
        for region, device, cost in zip(sources.regions, sources.plan.devices, sources.costs)
    ]


def _spans(pairs) -> dict[int, float]:
    bounds: dict[int, list[float]] = {}
    for region, bar in pairs:
        low, high = bounds.setdefault(region, [bar["start"], bar["end"]])
        bounds[region] = [min(low, bar["start"]), max(high, bar["end"])]
    return {region: high - low for region, (low, high) in bounds.items()}


def _memory(program: core.Program, peaks: dict[str, int]) -> list[dict]:
    """Per tier (disk only where the plan puts bytes there): bytes held over the predicted
    time, counted as the simulator counts them (cpp/src/sim/program_sim.cc): the residents,
    plus each transient buffer from its first writer's start to its Free's end; on disk,
    the file ranges weights are read from too."""
    times = _times(program.schedule.instructions)
    until = max((end for _, end, _ in times), default=0.0)
    events = _buffer_events(program, times)
    on_files = defaultdict(int)
    for buffer in program.buffers:
        if buffer.file >= 0:
            on_files[buffer.tier] += buffer.bytes
    memory_plan, tiers = program.memory_plan, []
    for t, tier in enumerate(program.tiers):
        disk = tier.kind == core.TierKind.Disk
        base = memory_plan.resident_bytes[t] + (on_files[t] if disk else 0)
        if disk and not base and not events[t]:
            continue
        points, level = [(0.0, base)], base
        for at, *_, delta in sorted(events[t]):
            level += delta
            points.append((at, level))
        tiers.append(
            {
                "name": tier.name,
                "kind": tier.kind.name.lower(),
                "capacity": tier.capacity_bytes,
                "points": points,
                "until_us": until,
                "predicted_peak": max(level for _, level in points),
                "plan_peak": memory_plan.peak_bytes[t],
                "measured_peak": peaks.get(tier.name),
            }
        )
    return tiers


def _buffer_events(program: core.Program, times: list[tuple[float, float, bool]]) -> dict[int, list[tuple]]:
    """Per tier, (time, order, buffer, step, bytes) for each transient arena buffer's first
    write (+) and Free (-) at the instructions' `times`; sorted, they replay the simulator's
    sweep: at one instant frees first, then lives that take no time, then allocations."""
    begin: dict[int, float] = {}
    end: dict[int, float] = {}
    for p, (start, finish, _) in enumerate(times):
        begin.update((b, start) for b in program.first_writes[p])
        end.update((b, finish) for b in program.frees[p])
    events: dict[int, list[tuple]] = defaultdict(list)
    for b, buffer in enumerate(program.buffers):
        if buffer.lifetime != core.BufferLifetime.Transient or buffer.file >= 0 or b not in begin:
            continue
        tier_events, size = events[buffer.tier], buffer.bytes
        if end.get(b) == begin[b]:
            tier_events += [(begin[b], 1, b, 0, size), (begin[b], 1, b, 1, -size)]
            continue
        tier_events.append((begin[b], 2, b, 0, size))
        if b in end:
            tier_events.append((end[b], 0, b, 1, -size))
    return events
