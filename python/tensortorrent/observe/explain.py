"""The explain() report: regions, the schedule and the direct-path decision, as text."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..capture.program import NormalizedProgram
from ..config import CompileConfig
from ..objective import PlanMeasures
from ..partition import Region
from ..planning import ExecutionPlan
from ..planning.costs import RegionCost
from ..planning.placement import Placement
from ..units import format_bytes


def explain(
    model_name: str,
    inputs: str,
    program: NormalizedProgram,
    regions: Sequence[Region],
    plan: ExecutionPlan,
    config: CompileConfig,
    costs: Sequence[RegionCost],
    origin: str = "",
    data_plane: Sequence[str] = (),
    direct_reason: str | None = None,
    region_backends: Sequence[str] = (),
    region_marks: Sequence[str] = (),
) -> str:
    """A readable report of what compile decided and why; `origin` says where it came from;
    `data_plane` describes the Program the data plane runs (it replaces the schedule);
    `direct_reason` overrides the plan's direct-path decision; `region_backends` describes
    what the regions run where some run compiled code (and the numerics check);
    `region_marks` ends each region's line (the formats of its compressed layers)."""
    tied = sum(1 for b in program.bound if len(b.names) > 1)
    placement = plan.placement
    lines = [
        f"TensorTorrent plan for {model_name}",
        *([f"  {origin}"] if origin else []),
        f"  inputs: {inputs}",
        f"  operations: {len(program.compute_nodes)} in {len(regions)} region(s); "
        f"bound tensors: {len(program.bound)} ({format_bytes(program.parameter_bytes)}"
        + (f", {tied} tied" if tied else "")
        + ")",
        "  config: " + ", ".join(f"{k}={v}" for k, v in config.as_dict().items()),
    ]
    if placement is not None:
        lines += _machine_lines(placement)
    lines += ["", "Regions", *_region_lines(regions, plan, costs, region_marks or [""] * len(regions))]
    if region_backends:
        lines += ["", *region_backends]
    if placement is not None:
        lines += ["", *_finalist_lines(placement), *_layer_choice_lines(placement, regions)]
    lines += ["", *data_plane] if data_plane else ["", "Schedule", *_schedule_lines(plan)]
    concurrency = f"up to {plan.max_concurrent} instruction(s) at once (the calling thread and a worker pool)"
    lines += [
        "",
        f"Execution: {concurrency}; stall timeout {plan.stall_timeout_s:g} s",
        f"Direct path: {direct_reason or plan.direct_reason}",
    ]
    return "\n".join(lines)


def _machine_lines(placement: Placement) -> list[str]:
    lines = [f"  objective: {placement.objective.describe()}", "  devices:"]
    for device in placement.machine.devices:
        if device.is_cpu:  # host RAM's budget is the machine's
            ram = format_bytes(placement.machine.ram_bytes)
            lines.append(f"    {device.name}: computes in host RAM ({ram} budget); times measured")
        else:
            lines.append(f"    {device.name}: {device.describe()}")
    names = placement.machine.tier_names
    for a, b, rate in placement.machine.peer_links:
        if a < b:  # one line per pair: a peer link has one figure both ways
            lines.append(f"    peer link {names[a]} <-> {names[b]}: {rate / 1e9:g} GB/s each way (no staging in RAM)")
    return lines


def _region_lines(
    regions: Sequence[Region], plan: ExecutionPlan, costs: Sequence[RegionCost], marks: Sequence[str]
) -> list[str]:
    placement = plan.placement
    several = placement is not None and len(placement.machine.devices) > 1
    names = [d.name for d in placement.machine.devices] if several else []
    header = (
        f"  {'region':<24} {'ops':>5} {'params':>11} {'MFLOP':>9} {'cpu ms':>8} {'device':<8} "
        f"{'params live':<18} {'depends on':<12} "
    )
    header += ("predicted ms on " + " | ".join(names)) if several else "modules"
    lines = [header]
    for region, device, cost, mark in zip(regions, plan.devices, costs, marks):
        deps = ", ".join(f"r{d}" for d in region.deps) or "-"
        measured = "-" if cost.cpu_seconds is None else f"{cost.cpu_seconds * 1e3:.3f}"
        tail = region.span
        if several:
            tail = " | ".join(
                "cannot run (memory)" if math.isinf(s) else f"{s * 1e3:.3f}" for s in placement.compute_s[region.index]
            )
        lines.append(
            f"  {region.name:<24} {len(region.nodes):>5} {format_bytes(region.parameter_bytes):>11} "
            f"{cost.flops / 1e6:>9.2f} {measured:>8} {device:<8} {_params_tier(plan, region.index):<18} "
            f"{deps:<12} {tail}{mark}"
        )
    if costs and all(cost.cpu_seconds is not None for cost in costs):
        total = sum(cost.cpu_seconds for cost in costs) * 1e3
        lines.append(f"  measured at compile: {total:.3f} ms for all regions one after another on the cpu")
    if several:
        lines.append(
            "  (each region's device is the search's choice among these times, the transfers they imply and memory)"
        )
    return lines


def _params_tier(plan: ExecutionPlan, region: int) -> str:
    """Where a region's parameter group lives."""
    if plan.placement is None or plan.devices[region] == "cpu":
        return "ram"
    chosen = plan.placement.chosen
    if any(split.layer.region == region for split in chosen.splits):
        return "ram, split"
    return f"resident on {plan.devices[region]}" if chosen.resident[region] else "ram, streamed/call"


def _finalist_lines(placement: Placement) -> list[str]:
    machine, chosen = placement.machine, placement.chosen
    capacities = machine.tier_capacities()
    peaks = ", ".join(
        f"{name} {format_bytes(peak)} of {format_bytes(capacity)}"
        for name, peak, capacity in zip(machine.tier_names, chosen.simulated.peak_bytes, capacities)
    )
    lines = [
        "Prediction (the simulator, on the program that runs)",
        f"  {_measures_text(chosen.measures)} per call",
        f"  peak memory: {peaks}",
        f"  streamed parameters load {'one region ahead' if chosen.program.prefetch else 'one region at a time'}"
        " on each device (prefetch distance " + str(chosen.program.prefetch) + ")",
    ]
    if not placement.searched:
        lines.append("  one device: no search needed")
        return lines
    lines.append("Finalists (the search's best, ranked by the simulator under the objective)")
    for rank, candidate in enumerate(placement.finalists):
        counts = {}
        for device in candidate.devices:
            name = machine.devices[device].name
            counts[name] = counts.get(name, 0) + 1
        where = ", ".join(f"{name} x{count}" for name, count in counts.items())
        resident = sum(candidate.resident[r] for r, d in enumerate(candidate.devices) if not machine.devices[d].is_cpu)
        over = ", ".join(candidate.over_capacity)
        fits = f"memory plan over capacity on {over}" if over else "fits"
        split = f"; {len(candidate.splits)} layer(s) split" if candidate.splits else ""
        lines.append(
            f"  {'*' if rank == 0 else ' '}{rank + 1}. {where}; {resident} region(s) resident on devices{split}; "
            f"{_measures_text(candidate.measures)}; value {candidate.value:.6g}; {fits}"
        )
    return lines


def _layer_choice_lines(placement: Placement, regions: Sequence[Region]) -> list[str]:
    """Per layer whose weights live in host RAM on a machine with devices: copied to its
    device on every call, computed on the CPU, or split between both, and the times behind it."""
    machine, chosen = placement.machine, placement.chosen
    if machine.is_cpu_only:
        return []
    splits = {split.layer.region: split for split in chosen.splits}
    lines = []
    for region in regions:
        index, device = region.index, machine.devices[chosen.devices[region.index]]
        if region.parameter_bytes == 0 or (not device.is_cpu and chosen.resident[index]):
            continue
        if device.is_cpu:
            lines.append(f"  {region.name:<24} computed on the cpu from host RAM{_why_cpu(placement, region)}")
            continue
        link_ms = machine.to_device_seconds(device.tier, region.parameter_bytes) * 1e3
        device_ms = placement.compute_s[index][chosen.devices[index]] * 1e3
        times = f"copy {link_ms:.3f} ms, {device.name} {device_ms:.3f} ms"
        split = splits.get(index)
        if split is None:
            lines.append(
                f"  {region.name:<24} copied to {device.name} ({format_bytes(region.parameter_bytes)}); {times}"
            )
            continue
        cpu = machine.cpu_index
        rows, total = split.device_rows, split.layer.rows
        lines.append(
            f"  {region.name:<24} split: rows 0:{rows} of {total} ({split.device_share:.0%}) on {device.name}, "
            f"the rest on the cpu; {times}, cpu {placement.compute_s[index][cpu] * 1e3:.3f} ms"
        )
    if not lines:
        return []
    return [
        "Layers whose weights live in host RAM: copied to their device per call, computed on the cpu, or split",
        *lines,
    ]


def _why_cpu(placement: Placement, region: Region) -> str:
    """The times that kept a layer on the CPU: its compute there against copying its
    weights to each device on every call."""
    machine, index = placement.machine, region.index
    cpu = machine.cpu_index
    copies = [
        f"{d.name} {machine.to_device_seconds(d.tier, region.parameter_bytes) * 1e3:.3f} ms" for d in machine.on_devices
    ]
    return f" (cpu {placement.compute_s[index][cpu] * 1e3:.3f} ms; copying its weights: {', '.join(copies)})"


def _measures_text(measures: PlanMeasures) -> str:
    return (
        f"makespan {measures.latency_s * 1e3:.3f} ms, busiest resource {measures.bottleneck_s * 1e3:.3f} ms, "
        f"moved {format_bytes(measures.traffic_bytes)}"
    )


def _schedule_lines(plan: ExecutionPlan) -> list[str]:
    lines = ["  (not used: the direct path calls the region inline)"] if plan.direct else []
    for position in plan.schedule.topological_order:
        instruction = plan.schedule.instructions[position]
        deps = ", ".join(str(d) for d in instruction.deps) or "-"
        kind = str(instruction.kind.name).lower()
        predicted = ""
        if instruction.predicted_end_us >= 0:
            predicted = (
                f"  predicted {instruction.predicted_start_us / 1e3:.3f}-{instruction.predicted_end_us / 1e3:.3f} ms"
            )
        lines.append(
            f"  {instruction.id:>4}  {kind:<8} {instruction.label:<28} on {instruction.device:<10} "
            f"after {deps}{predicted}"
        )
    return lines


def training_lines(
    devices: Sequence[str], saved_bytes: Sequence[int], program, tier_names: Sequence[str], apart: Sequence[str] = ()
) -> list[str]:
    """explain()'s section on the training program: where its regions run, what autograd
    saves for backward, the copies per call and the memory plan per tier (`program`: the
    data plane's Program, None on the direct path); `apart`: its devices with memory of
    their own (GPUs)."""
    placed = ", ".join(f"{d} x{devices.count(d)}" for d in dict.fromkeys(devices))
    lines = [
        "Training program (after train(): captured in training mode, autograd records calls where grad is on)",
        f"  regions: {len(devices)} ({placed})",
        f"  saved for backward: {format_bytes(sum(saved_bytes))} per call, measured per region when compiling",
    ]
    if apart:
        lines.append(
            f"  {', '.join(apart)}: no weight resident (the optimizer steps the parameters in RAM), "
            "each call copies them there"
        )
    if program is None:
        return lines + ["  runs inline on the calling thread (the direct path): no data plane program"]
    copies = [i for i in program.schedule.instructions if str(i.kind).endswith("Copy")]
    moved = sum(program.buffers[b].bytes for i in copies for b in i.reads)
    peaks = ", ".join(f"{n} {format_bytes(p)}" for n, p in zip(tier_names, program.memory_plan.peak_bytes))
    return lines + [
        f"  copies per call: {len(copies)} ({format_bytes(moved)}); their gradients go back over the reverse links",
        f"  memory plan, with what is saved for backward held to the end of the call: {peaks}",
    ]


def explain_saved(manifest: dict, inputs: str, devices: str, plan: ExecutionPlan, verdict: str) -> str:
    """The report of a saved artifact from its manifest alone (no weights, no program);
    `devices` names those it was compiled for; `verdict` says whether this machine would
    replay the saved plan or plan again."""
    costs = (manifest["predicted_costs"] or {}).get("regions", [])
    lines = [
        f"TensorTorrent plan for {manifest['model_name']} (saved by tensortorrent {manifest['tensortorrent']}, "
        f"torch {manifest['torch']})",
        f"  on this machine: {verdict}",
        f"  inputs: {inputs}",
        f"  compiled for: {devices}",
        f"  regions: {len(manifest['regions'])}; "
        f"weights: {format_bytes(sum(r.get('parameter_bytes', 0) for r in manifest['regions']))}",
        "  config: " + ", ".join(f"{k}={v}" for k, v in manifest["config"].items()),
        "",
        "Regions",
        f"  {'region':<24} {'ops':>5} {'params':>11} {'MFLOP':>9} {'cpu ms':>8} {'device':<8} depends on",
    ]
    for position, (region, device) in enumerate(zip(manifest["regions"], plan.devices)):
        cost = costs[position] if position < len(costs) and isinstance(costs[position], dict) else {}
        name = f"r{region['index']}" + (f":{region['layer']}" if region.get("layer") else "")
        flops = f"{cost['flops'] / 1e6:.2f}" if isinstance(cost.get("flops"), (int, float)) else "-"
        measured = cost.get("cpu_seconds")
        measured = f"{measured * 1e3:.3f}" if isinstance(measured, (int, float)) else "-"
        deps = ", ".join(f"r{d}" for d in region.get("deps", [])) or "-"
        lines.append(
            f"  {name:<24} {len(region['operations']):>5} {format_bytes(region.get('parameter_bytes', 0)):>11} "
            f"{flops:>9} {measured:>8} {device:<8} {deps}"
        )
    lines += ["", "Schedule", *_schedule_lines(plan)]
    lines += [
        "",
        f"Execution: up to {plan.max_concurrent} instruction(s) at once; stall timeout {plan.stall_timeout_s:g} s",
        f"Direct path: {plan.direct_reason}",
    ]
    return "\n".join(lines)
