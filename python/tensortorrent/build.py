"""The one build path: a Source built for a Target into the Executable a CompiledModule runs.

tt.compile (a module, an exported program, a .pt2 with a checkpoint), a checkpoint's
compile and tt.load_compiled all come here: partition, region backends, one
ProgramRunner, profile, place (each finalist lowered and simulated once), and the
winner's program kept to run, streaming its weights from disk where the source says.
A loaded CPU plan replays its saved regions and plan instead (`saved`)."""

from __future__ import annotations

import contextlib
import functools
import logging
from dataclasses import dataclass, replace

import torch

from .capture import capture_model, normalize
from .config import CompileConfig
from .errors import MemoryCapacityError, PlanningError
from .objective import ObjectiveFunction
from .partition import Region, parameter_owners, partition
from .planning import ExecutionPlan, build_plan
from .planning.costs import region_costs, roofline_seconds
from .planning.fit import weight_bytes
from .planning.machine import RAM
from .planning.placement import place
from .planning.profile_cache import profiled_cpu_seconds
from .planning.saved_for_backward import saved_bytes
from .planning.streaming import Layout
from .runtime import CompiledModule
from .runtime.device_kernels import accelerator_regions
from .runtime.executable import Executable, executable
from .runtime.packed_weights import pack_room_bytes
from .runtime.program_runner import ProgramRunner
from .runtime.region_backends import (
    EAGER,
    INDUCTOR,
    RegionChoice,
    compile_regions,
    eager_backends,
    unless_model_forward_is_faster,
)
from .runtime.streamed_weights import PROFILED_COSTS, stream_weights
from .source import Source
from .storage.checkpoint_weights import with_checksums
from .storage.safetensors_file import read_slot
from .target import Target
from .units import format_bytes

log = logging.getLogger(__name__)

COSTS_SAID = {True: "measured by a profiling call", False: "from a roofline, not measured"}  # explain()'s words
# The stages build() marks on a progress display; callers put their own before them.
STAGES = ["partition", "compile regions", "profile", "plan", "stream", "build"]


@dataclass(frozen=True)
class Saved:
    """A loaded artifact's CPU plan, replayed as it was saved (same machine, same config)."""

    regions: list[Region]
    plan: ExecutionPlan
    backends: list[RegionChoice] | None  # what each region ran (None: not recorded)
    cpu_seconds: list[float] | None  # the region times measured when compiled, where recorded


def build(
    source: Source, target: Target, config: CompileConfig, *, saved: Saved | None = None, progress=None
) -> Executable:
    """The Executable of `source` on `target`. Weights in RAM stay there where the whole
    plan (weights and working set) fits the RAM budget; else, where the config lets them
    stream (a RAM budget given, disk streaming allowed, no training), they stream from
    the weights cache. Where neither fits, a PlanningError names the smallest budget with
    which one does. `progress` (a CompileProgress) shows each stage."""
    may_stream = (
        not source.streams
        and config.ram_budget_bytes is not None
        and config.allow_disk_streaming
        and not config.allow_training
    )
    if not may_stream:
        return _build(source, target, config, saved, progress)
    in_ram_need = None
    if weight_bytes(source.model) <= target.budgets.ram.amount:
        try:
            return _build(source, target, config, saved, progress)
        except PlanningError as error:
            if error.tier != target.machine.tier_names[RAM]:
                raise
            in_ram_need = error.needed_bytes
            log.info("the weights in RAM with the activations need %d bytes: streaming them instead", in_ram_need)
    try:
        return _build(source.cached(config, target.budgets), target, config, saved, progress)
    except MemoryCapacityError as error:
        if error.smallest_budget_bytes is None:
            raise
        streamed_need = error.smallest_budget_bytes
        if in_ram_need is None and streamed_need > weight_bytes(source.model):
            in_ram_need = _in_ram_need(source, target, config)  # a plan keeping the weights in RAM may need less
        raise _too_small(target.budgets.ram.amount, in_ram_need, streamed_need) from error


def training_twin(source: Source, target: Target, config: CompileConfig) -> CompiledModule:
    """The program train() switches to: the model captured in training mode, planned as
    the inference one is, with what autograd saves for backward counted in each region's
    memory, and the parameters of GPU regions copied from RAM on every call
    (planning/placement.py). Its regions run aten's kernels op by op, which autograd records."""
    program = normalize(capture_model(source.model, source.args, source.kwargs, training=True))
    twin = replace(source, program=program)
    return compiled_module(twin, config, _build(twin, target, config, training=True))


def compiled_module(source: Source, config: CompileConfig, built: Executable) -> CompiledModule:
    return CompiledModule(
        model=source.model,
        model_name=source.model_name,
        signature=source.signature,
        config=config,
        executable=built,
    )


def _build(
    source: Source,
    target: Target,
    config: CompileConfig,
    saved: Saved | None = None,
    progress=None,
    training: bool = False,
) -> Executable:
    stage = progress.stage if progress is not None else lambda name: contextlib.nullcontext()
    program, flat, budgets = source.program, source.flat_inputs(), target.budgets
    with stage("partition"):
        regions = saved.regions if saved is not None else _partition(source, target, config)
    backends = eager_backends(len(regions))
    if not training:  # the training program runs aten's kernels op by op, which autograd records
        with stage("compile regions"):
            backends = _compile_regions(source, target, config, regions, saved, progress)
    runner = ProgramRunner(program, regions, backends)
    if not source.values_in_ram:  # the weights are on disk: None in the runner, read per region where profiled
        runner.rebind([None if slot in source.on_disk.ranges else v for slot, v in enumerate(runner.bound_values)])
    with stage("profile"):
        if training:
            runner.saved_bytes = saved_bytes(runner, flat)
        seconds, machine = _profiled(source, target, runner, flat, saved)
    with stage("plan"):
        placement = None
        # The CPU alone with its regions untimed has nothing to choose or simulate: the plan is
        # lowered as it is (stream_weights, or the in-memory lowering).
        if saved is None and not (seconds is None and machine.is_cpu_only):
            costs = region_costs(regions, seconds or _roofline(regions))
            placement = _place(runner, regions, costs, machine, config, budgets.cpus.amount, training)
        plan = saved.plan if saved is not None else build_plan(regions, config, budgets.cpus.amount, placement)
    streamed, origin = None, source.origin
    if source.streams:
        with stage("stream"):
            streamed = _streamed(source, runner, regions, plan, placement, seconds, config, budgets.ram.amount)
            if origin:
                origin += "; region costs " + COSTS_SAID[streamed.costs == PROFILED_COSTS]
    predicted = streamed.predicted_s() if streamed else placement.chosen.measures.latency_s if placement else None
    with stage("build"):
        if placement is not None and not training:
            _compile_for_accelerators(runner, placement, config, progress)
        built = executable(
            program,
            regions,
            plan,
            config,
            runner=runner,
            backends=backends,
            streamed=streamed,
            ram_budget_bytes=budgets.ram.amount,
            cpu_seconds=seconds,
            origin=origin,
            # The model's own forward runs aten's kernels: not where a region got another
            # (inductor's code, products on oneDNN).
            runs_model_forward=source.model_forward and not training and not backends.forwards,
            predicted_s=predicted,
        )
    log.info(
        "compiled %s%s: %d region(s) on %s, %s",
        source.model_name,
        f" ({origin})" if origin else "",
        len(regions),
        ", ".join(sorted(set(plan.devices))),
        f"predicted {predicted * 1e3:.3f} ms per call" if predicted is not None else "not simulated",
    )
    return built


def _streamed(source: Source, runner, regions, plan, placement, seconds, config, budget: int):
    """The program streaming `source`'s weights from disk within `budget` bytes of RAM, its
    regions where `placement` puts them on devices (the CPU without one)."""
    weights = with_checksums(source.on_disk, budget) if source.checksum else source.on_disk
    on_devices = placement is not None and not placement.machine.is_cpu_only
    layout = Layout.of_placement(placement) if on_devices else None
    # Where the regions were not timed with their weights in RAM, a profiling call that
    # streams them times them (where one is quick enough).
    example = source.flat_inputs() if seconds is None else None
    # Weights shared with other programs are in RAM already: this one holds none of its own.
    hold_none = source.shared_slots is not None
    return stream_weights(
        runner, regions, weights, config, plan.max_concurrent, source.verify, budget, example, layout, hold_none
    )


def _partition(source: Source, target: Target, config: CompileConfig) -> list[Region]:
    # A region per parameter group where its weights move on every call: each streams alone,
    # and each Linear may be split between the cpu and a device.
    fine = source.streams or target.machine.shares_layers(weight_bytes(source.model))
    layers = source.layers | (parameter_owners(source.program) if fine else frozenset())
    return partition(source.program, layers, config.max_region_nodes, innermost=fine)


def _compile_regions(source: Source, target: Target, config, regions, saved: Saved | None, progress):
    """Each region's kernel (runtime/region_backends.py): timed on the example's values
    where the weights are in RAM; packed copies of weights only in a CPU plan whose
    weights stay the same tensors in RAM (none where they stream or may go to a device)."""
    program, flat = source.program, source.flat_inputs()
    in_place = source.values_in_ram and not source.streams and target.machine.is_cpu_only
    backends = compile_regions(
        program,
        regions,
        config.region_backend,
        saved=saved.backends if saved is not None else None,
        on_region=progress.region_compiling if progress is not None else None,
        region_inputs=(lambda: ProgramRunner(program, regions).region_inputs(flat)) if source.values_in_ram else None,
        pack_room_bytes=pack_room_bytes(target.budgets.ram.amount, weight_bytes(source.model)) if in_place else 0,
    )
    # The one region of a resident CPU plan (the model in eval mode) may run the model's
    # own forward instead of a kernel it did not have to get ("inductor" asks for inductor's).
    if (
        in_place
        and source.model_forward
        and config.region_backend != INDUCTOR
        and len(regions) == 1
        and backends.forwards
        and not any(module.training for module in source.model.modules())
    ):
        runner = ProgramRunner(program, regions, backends)
        backends = unless_model_forward_is_faster(
            backends, lambda: runner.run_inline(flat), lambda: source.model(*source.args, **source.kwargs)
        )
    return backends


def _profiled(source: Source, target: Target, runner, flat, saved: Saved | None):
    """The regions' CPU times (None where not measured: the weights are on disk, or on the
    CPU alone with stand-in inputs) and the machine to place on, with each accelerator's
    region times measured there (on disk, each region's weights read for it alone and let
    go after)."""
    # Streamed, the program that streams holds RAM to the budget, not the placement.
    machine = target.streamed() if source.streams else target.machine
    if saved is not None or (machine.is_cpu_only and (source.stand_in_inputs or not source.values_in_ram)):
        return saved.cpu_seconds if saved is not None else None, machine
    if not source.values_in_ram:
        return None, machine.profiled(runner, flat, functools.partial(read_slot, source.on_disk))
    with torch.random.fork_rng():  # a training program's random operations leave the caller's seed alone
        seconds, reused = profiled_cpu_seconds(runner, flat)
        log.debug("region times %s", "reused from the profile cache" if reused else "measured")
        return seconds, machine.profiled(runner, flat)


def _roofline(regions) -> list[float]:
    return [roofline_seconds(region, cost) for region, cost in zip(regions, region_costs(regions))]


def _place(runner, regions, costs, machine, config, cpus: int, training: bool = False):
    objective = ObjectiveFunction.make(config.objective, config.objective_weights, machine.slowest_link_bytes_per_s())
    cpu_slots = config.max_concurrent_regions or cpus
    return place(runner, regions, costs, machine, objective, cpus, cpu_slots, training)


def _in_ram_need(source: Source, target: Target, config) -> int:
    """The RAM that the plan keeping the weights in RAM needs, placed as build() would
    place it (region times measured where devices make the placement depend on them)."""
    regions = _partition(source, target, config)
    runner = ProgramRunner(source.program, regions)
    machine = target.streamed()
    seconds = [0.0] * len(regions)
    if not machine.is_cpu_only:
        flat = source.flat_inputs()
        seconds, _ = profiled_cpu_seconds(runner, flat)
        machine = machine.profiled(runner, flat)
    placement = _place(runner, regions, region_costs(regions, seconds), machine, config, target.budgets.cpus.amount)
    return placement.chosen.simulated.arena_bytes[RAM]


def _compile_for_accelerators(runner, placement, config, progress) -> None:
    """Each region placed on a GPU gets its kernel there now, under the progress display
    (inductor compiles it for the device where the region backend asks)."""
    if config.region_backend == EAGER:
        return
    regions = accelerator_regions(placement)
    for index, (region, device) in enumerate(regions):
        if progress is not None:
            progress.region_compiling(index, len(regions), f"compile regions for {device}")
        runner.kernels[region].on_devices.forward(device)


def _too_small(budget: int, in_ram_need: int | None, streamed_need: int) -> PlanningError:
    """The error for a RAM budget below every plan: it names the smallest budget that
    compiles, of the plan keeping the weights in RAM and the streamed ones."""
    smallest = min(streamed_need, in_ram_need if in_ram_need is not None else streamed_need)
    in_ram = f"weights in RAM: {in_ram_need} bytes; " if in_ram_need is not None else ""
    return PlanningError(
        f"no plan fits host RAM: ram_budget_bytes={budget} ({format_bytes(budget)}) is below the smallest budget "
        f"this model compiles with: {smallest} bytes ({format_bytes(smallest)}), weights and working set "
        f"({in_ram}weights streamed from disk: {streamed_need} bytes)",
        tier="ram",
        needed_bytes=smallest,
        allowed_bytes=budget,
        smallest_budget_bytes=smallest,
    )
