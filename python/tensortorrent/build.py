"""Build: a captured program of one model partitioned, profiled, planned and built into a
CompiledModule, for tt.compile and for an artifact loaded onto devices (onto_devices.py)."""

from __future__ import annotations

import contextlib
import logging

import torch

from .capture import InputSignature, capture_model, normalize
from .errors import MemoryCapacityError, PlanningError
from .objective import ObjectiveFunction
from .partition import layer_paths, parameter_owners, partition
from .planning import build_plan
from .planning.costs import region_costs
from .planning.fit import weight_bytes
from .planning.machine import RAM
from .planning.placement import place
from .planning.profile_cache import profiled_cpu_seconds
from .planning.saved_for_backward import saved_bytes
from .planning.streaming import Layout
from .runtime import CompiledModule
from .runtime.device_kernels import accelerator_regions
from .runtime.executable import executable
from .runtime.packed_weights import pack_room_bytes
from .runtime.program_runner import ProgramRunner
from .runtime.region_backends import EAGER, INDUCTOR, compile_regions, eager_backends, unless_model_forward_is_faster
from .runtime.streamed_weights import stream_from_cache
from .target import Target
from .units import format_bytes

log = logging.getLogger(__name__)


class Build:
    """Partitions, profiles, plans and builds a captured program of one model.

    `model` holds the program's weights; `args` and `kwargs` are inputs of the compiled
    shapes, run to time the regions. An artifact's loader passes the layers its regions
    were cut at (`layers`; by default the model's modules), `model_forward=False` (its
    model is a tree of weights, with no forward to call) and an `origin` for explain().
    `may_stream`: the weights may stream from disk where keeping them in RAM does not fit
    the RAM budget (see within_budget).
    """

    def __init__(
        self,
        model,
        model_name,
        args,
        kwargs,
        config,
        target: Target,
        *,
        layers: frozenset[str] | None = None,
        model_forward: bool = True,
        origin: str = "",
        may_stream: bool = False,
    ) -> None:
        self.model, self.model_name, self.args, self.kwargs = model, model_name, args, kwargs
        self.config, self.target = config, target
        self.layers = layer_paths(model) if layers is None else layers
        self.model_forward, self.origin = model_forward, origin
        self.may_stream = may_stream

    def compiled(self, program, stage, streaming: bool = False, training: bool = False, progress=None):
        """The CompiledModule of `program` and its placement; `stage` marks the progress
        (`progress`, where given, shows each region compiling). `training`: a program
        captured in training mode, for calls autograd records (its regions run eagerly)."""
        model, config, budgets = self.model, self.config, self.target.budgets
        signature = InputSignature(self.args, self.kwargs)
        with stage("partition"):
            regions = self._partition(program, streaming)
        backends = eager_backends(len(regions))
        if not training:  # the training program runs aten's kernels op by op, which autograd records
            with stage("compile regions"):
                on_region = progress.region_compiling if progress is not None else None
                flat = signature.flatten(self.args, self.kwargs)
                backends = compile_regions(
                    program,
                    regions,
                    config.region_backend,
                    on_region=on_region,
                    region_inputs=lambda: ProgramRunner(program, regions).region_inputs(flat),
                    pack_room_bytes=self._pack_room_bytes(streaming),
                )
                if self._may_call_model_forward(regions, backends, streaming):
                    backends = self._unless_model_forward_is_faster(program, regions, backends, signature)
        runner = ProgramRunner(program, regions, backends)
        with stage("profile"):
            flat = signature.flatten(self.args, self.kwargs)
            if training:
                runner.saved_bytes = saved_bytes(runner, flat)
            with torch.random.fork_rng():  # a training program's random operations leave the caller's seed alone
                seconds, reused = profiled_cpu_seconds(runner, flat)
                log.debug("region times %s", "reused from the profile cache" if reused else "measured")
                # Streamed, the program that streams holds RAM to the budget, not the placement.
                plan_machine = self._machine(streaming).profiled(runner, flat)
        with stage("plan"):
            placement = self._place(runner, regions, seconds, plan_machine, training)
            plan = build_plan(regions, config, cpus=budgets.cpus.amount, placement=placement)
        streamed = None
        if streaming:
            with stage("stream"):
                layout = None if plan_machine.is_cpu_only else Layout.of_placement(placement)
                streamed = stream_from_cache(program, regions, config, budgets, plan.max_concurrent, layout, backends)
        with stage("build"):
            if not training:
                self._compile_for_accelerators(runner, placement, progress)
            compiled = CompiledModule(
                model=model,
                # The model's own forward runs aten's kernels: not where a region got another
                # (inductor's code, products on oneDNN).
                runs_model_forward=self.model_forward and not training and not backends.forwards,
                model_name=self.model_name,
                signature=signature,
                config=config,
                executable=executable(
                    program,
                    regions,
                    plan,
                    config,
                    runner=runner,
                    backends=backends,
                    streamed=streamed,
                    ram_budget_bytes=budgets.ram.amount,
                    cpu_seconds=seconds,
                    origin=self.origin,
                ),
            )
        return compiled, placement

    def within_budget(self, program, stage, progress=None):
        """The CompiledModule of `program` and its placement: its weights in RAM where that
        whole plan (weights and working set) fits the RAM budget, else, where `may_stream`,
        streamed from the weights cache. Where neither fits, a PlanningError names the
        smallest budget with which one does."""
        in_ram_need = None
        if not self.may_stream or weight_bytes(self.model) <= self.target.budgets.ram.amount:
            try:
                return self.compiled(program, stage, progress=progress)
            except PlanningError as error:
                if not self.may_stream or error.tier != self.target.machine.tier_names[RAM]:
                    raise
                in_ram_need = error.needed_bytes
                log.info("the weights in RAM with the activations need %d bytes: streaming them instead", in_ram_need)
        try:
            return self.compiled(program, stage, streaming=True, progress=progress)
        except MemoryCapacityError as error:
            if error.smallest_budget_bytes is None:
                raise
            streamed_need = error.smallest_budget_bytes
            if in_ram_need is None and streamed_need > weight_bytes(self.model):
                in_ram_need = self._in_ram_need(program)  # a plan keeping the weights in RAM may need less
            raise _too_small(self.target.budgets.ram.amount, in_ram_need, streamed_need) from error

    def _partition(self, program, streaming: bool):
        # A region per parameter group where its weights move on every call: each streams alone,
        # and each Linear may be split between the cpu and a device.
        fine = streaming or self.target.machine.shares_layers(weight_bytes(self.model))
        layers = self.layers | (parameter_owners(program) if fine else frozenset())
        return partition(program, layers, self.config.max_region_nodes, innermost=fine)

    def _machine(self, streaming: bool):
        return self.target.streamed() if streaming else self.target.machine

    def _place(self, runner, regions, seconds, plan_machine, training: bool = False):
        config, cpus = self.config, self.target.budgets.cpus.amount
        objective = ObjectiveFunction.make(
            config.objective, config.objective_weights, plan_machine.slowest_link_bytes_per_s()
        )
        cpu_slots = config.max_concurrent_regions or cpus
        return place(
            runner, regions, region_costs(regions, seconds), plan_machine, objective, cpus, cpu_slots, training
        )

    def _in_ram_need(self, program) -> int:
        """The RAM that the plan keeping the weights in RAM needs, placed as compiled() would
        place it (region times measured where devices make the placement depend on them)."""
        regions = self._partition(program, streaming=False)
        runner = ProgramRunner(program, regions)
        machine = self.target.streamed()
        seconds = [0.0] * len(regions)
        if not machine.is_cpu_only:
            flat = InputSignature(self.args, self.kwargs).flatten(self.args, self.kwargs)
            seconds, _ = profiled_cpu_seconds(runner, flat)
            machine = machine.profiled(runner, flat)
        placement = self._place(runner, regions, seconds, machine)
        return placement.chosen.simulated.arena_bytes[RAM]

    def _pack_room_bytes(self, streaming: bool) -> int:
        """The RAM that packed copies of weights may take (runtime/packed_weights.py) in a
        CPU plan whose weights stay the model's own tensors; none where they stream or may
        go to a device."""
        if streaming or not self.target.machine.is_cpu_only:
            return 0
        return pack_room_bytes(self.target.budgets.ram.amount, weight_bytes(self.model))

    def _compile_for_accelerators(self, runner, placement, progress) -> None:
        """Each region placed on a GPU gets its kernel there now, under the progress display
        (inductor compiles it for the device where the region backend asks)."""
        if self.config.region_backend == EAGER:
            return
        regions = accelerator_regions(placement)
        for index, (region, device) in enumerate(regions):
            if progress is not None:
                progress.region_compiling(index, len(regions), f"compile regions for {device}")
            runner.kernels[region].on_devices.forward(device)

    def _may_call_model_forward(self, regions, backends, streaming: bool) -> bool:
        """Whether the one region of a plan whose direct path would otherwise call the
        model's own forward (a resident CPU plan, the model in eval mode) got another kernel
        that did not have to be ("inductor" asks for inductor's code)."""
        return (
            self.model_forward
            and self.config.region_backend != INDUCTOR
            and len(regions) == 1
            and bool(backends.forwards)
            and not streaming
            and self.target.machine.is_cpu_only
            and not any(module.training for module in self.model.modules())
        )

    def _unless_model_forward_is_faster(self, program, regions, backends, signature):
        runner = ProgramRunner(program, regions, backends)
        flat = signature.flatten(self.args, self.kwargs)
        return unless_model_forward_is_faster(
            backends, lambda: runner.run_inline(flat), lambda: self.model(*self.args, **self.kwargs)
        )

    def training_twin(self) -> CompiledModule:
        """The program train() switches to: the model captured in training mode, planned
        as the inference one is, with what autograd saves for backward counted in each
        region's memory, and the parameters of GPU regions copied from RAM on every call
        (planning/placement.py)."""
        program = normalize(capture_model(self.model, self.args, self.kwargs, training=True))
        return self.compiled(program, lambda name: contextlib.nullcontext(), training=True)[0]


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
