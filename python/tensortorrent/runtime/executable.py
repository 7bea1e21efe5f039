"""Executable: what a build hands a CompiledModule to run, decided once at build time.

A plan runs one of three ways: the direct path (one resident region on the CPU: the
model's forward or the region's kernel called inline), one region resident on a device
(DeviceDirect), or its lowered Program on the data plane (PlaneProgram): streamed from
disk, placed on devices, or on the CPU with the weights used in place."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..capture.program import NormalizedProgram
from ..config import CompileConfig
from ..partition import Region
from ..planning import ExecutionPlan
from ..planning.streaming import in_memory_plan
from ..storage.spill_dir import spill_dir_for
from .device_direct import DeviceDirect, device_direct
from .plane_program import PlaneProgram
from .program_runner import ProgramRunner
from .region_backends import RegionBackends, eager_backends


@dataclass(frozen=True)
class Executable:
    program: NormalizedProgram  # the captured graph and its bound weights
    regions: list[Region]
    plan: ExecutionPlan
    runner: ProgramRunner  # the region kernels every call shares
    backends: RegionBackends  # what each region runs (eager, or inductor's code)
    plane: PlaneProgram | None  # the lowered Program on the data plane; None on a direct path
    on_device: DeviceDirect | None  # a one-region plan resident on a device
    streams: bool  # the weights stream from disk on every call
    cpu_seconds: list[float] | None = None  # measured region times, where known
    origin: str = ""  # explain()'s line on where the plan came from (a loaded artifact)
    runs_model_forward: bool = False  # the direct path may call the model's own forward
    predicted_s: float | None = None  # the simulated duration of one call; None where not simulated


def executable(
    program: NormalizedProgram,
    regions: list[Region],
    plan: ExecutionPlan,
    config: CompileConfig,
    *,
    runner: ProgramRunner | None = None,
    backends: RegionBackends | None = None,
    streamed: PlaneProgram | None = None,
    ram_budget_bytes: int | None = None,
    cpu_seconds: list[float] | None = None,
    origin: str = "",
    runs_model_forward: bool = False,
    predicted_s: float | None = None,
) -> Executable:
    """How `plan` runs: `streamed`, the data-plane program whose weights stream from disk,
    where the build made one; else a device plan's own lowered Program (or DeviceDirect for
    one resident region), or a CPU plan's Program with the weights used in place, held to
    `ram_budget_bytes` (None: unbounded); a CPU plan on the direct path needs neither.
    `runner`: the region kernels, if built already; `backends`: what each region runs
    (None: every region eager); `runs_model_forward`: the model's own forward computes
    what the one region of a direct CPU plan does."""
    backends = backends or eager_backends(len(regions))
    runner = streamed.runner if streamed is not None else runner or ProgramRunner(program, regions, backends)
    plane, on_device = streamed, None
    # A one-region plan that the search kept on the cpu runs as any CPU plan does.
    device_plan = plan.tiered and not (plan.direct and set(plan.devices) == {"cpu"})
    if device_plan and streamed is None and plan.direct and not runner.mutations:
        on_device = device_direct(runner, plan)
    elif device_plan and streamed is None:
        if plan.direct:
            plan = replace(
                plan, direct=False, direct_reason="not taken: the model updates its own buffers (the data plane's)"
            )
        plane = PlaneProgram(runner, plan.placement.chosen.program, machine=plan.placement.machine)
    elif streamed is None and not plan.direct:
        lowered = in_memory_plan(runner, regions, plan, ram_budget_bytes, config.activation_budget_bytes)
        plane = PlaneProgram(runner, lowered, spill_dir=spill_dir_for(lowered, config))
    return Executable(
        program,
        regions,
        plan,
        runner,
        backends,
        plane,
        on_device,
        streamed is not None,
        cpu_seconds,
        origin,
        runs_model_forward,
        predicted_s,
    )
