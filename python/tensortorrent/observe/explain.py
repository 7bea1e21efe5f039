"""The explain() report: regions, the schedule and the direct-path decision, as text."""

from __future__ import annotations

from collections.abc import Sequence

from ..capture.program import NormalizedProgram
from ..config import CompileConfig
from ..partition import Region
from ..planning import ExecutionPlan
from ..planning.costs import RegionCost


def format_bytes(count: int) -> str:
    """1536 -> '1.5 KiB'."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def explain(
    model_name: str,
    inputs: str,
    program: NormalizedProgram,
    regions: Sequence[Region],
    plan: ExecutionPlan,
    config: CompileConfig,
    costs: Sequence[RegionCost],
    origin: str = "",
) -> str:
    """A readable report of what compile decided and why; `origin` says where it came from."""
    tied = sum(1 for b in program.bound if len(b.names) > 1)
    lines = [
        f"TensorTorrent plan for {model_name}",
        *([f"  {origin}"] if origin else []),
        f"  inputs: {inputs}",
        f"  operations: {len(program.compute_nodes)} in {len(regions)} region(s); "
        f"bound tensors: {len(program.bound)} ({format_bytes(program.parameter_bytes)}"
        + (f", {tied} tied" if tied else "")
        + ")",
        "  config: " + ", ".join(f"{k}={v}" for k, v in config.as_dict().items()),
        "",
        "Regions",
        f"  {'region':<24} {'ops':>5} {'params':>11} {'MFLOP':>9} {'cpu ms':>8} {'device':<7} "
        f"{'depends on':<12} modules",
    ]
    for region, device, cost in zip(regions, plan.devices, costs):
        deps = ", ".join(f"r{d}" for d in region.deps) or "-"
        measured = "-" if cost.cpu_seconds is None else f"{cost.cpu_seconds * 1e3:.3f}"
        lines.append(
            f"  {region.name:<24} {len(region.nodes):>5} {format_bytes(region.parameter_bytes):>11} "
            f"{cost.flops / 1e6:>9.2f} {measured:>8} {device:<7} {deps:<12} {region.span}"
        )
    if costs and all(cost.cpu_seconds is not None for cost in costs):
        total = sum(cost.cpu_seconds for cost in costs) * 1e3
        lines.append(f"  measured at compile: {total:.3f} ms for all regions one after another on the cpu")
    lines += ["", "Schedule"]
    if plan.direct:
        lines.append("  (not used: the direct path calls the region inline)")
    for position in plan.schedule.topological_order:
        instruction = plan.schedule.instructions[position]
        deps = ", ".join(str(d) for d in instruction.deps) or "-"
        lines.append(f"  {instruction.id:>4}  compute {instruction.label:<24} on {instruction.device}  after {deps}")
    concurrency = f"up to {plan.max_concurrent} region(s) at once (the calling thread and a worker pool)"
    lines += [
        "",
        f"Execution: {concurrency}; stall timeout {plan.stall_timeout_s:g} s",
        f"Direct path: {plan.direct_reason}",
    ]
    return "\n".join(lines)
