"""tt.compile: capture, partition, plan and build a CompiledModule; tt.compile_modules for a series."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .artifact.streamed_weights import stream_from_cache
from .capture import InputSignature, capture_model, normalize
from .capture.composed_module import compose
from .capture.export import check_model, functional_program
from .capture.module_graph import ModuleGraph, series
from .config import CompileConfig
from .errors import InvalidArgumentError, UnsupportedError, UnsupportedFeatureError
from .from_checkpoint import compile_from_checkpoint, exported_source
from .hardware import discover_devices, hold_torch_threads, resolve_budgets
from .hardware.accelerator import named_accelerators
from .hardware.devices import names_accelerator
from .hardware.virtual import VirtualDevice, check_machine
from .objective import ObjectiveFunction
from .observe.progress import CompileProgress
from .partition import layer_paths, parameter_owners, partition
from .planning import build_plan
from .planning.costs import region_costs
from .planning.fit import check_fits, weight_bytes
from .planning.machine import resolve_machine
from .planning.placement import place
from .planning.profile_cache import profiled_cpu_seconds
from .planning.saved_for_backward import saved_bytes
from .planning.streaming import UNBOUNDED, Layout
from .runtime import CompiledModule
from .runtime.device_kernels import accelerator_regions
from .runtime.numerics_check import check_numerics
from .runtime.packed_weights import pack_room_bytes
from .runtime.program_runner import ProgramRunner
from .runtime.region_backends import EAGER, INDUCTOR, compile_regions, eager_backends, unless_model_forward_is_faster

log = logging.getLogger(__name__)

STAGES = ["export", "partition", "profile", "plan", "build"]


def compile(
    model: nn.Module | ModuleGraph,
    example_inputs: tuple | list | torch.Tensor = (),
    config: CompileConfig | None = None,
    devices: str | list[str] = "auto",
    *,
    example_kwargs: dict[str, Any] | None = None,
    machine: VirtualDevice | Sequence[VirtualDevice] | None = None,
    checkpoint: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
) -> CompiledModule:
    """Compiles `model` for the shapes of `example_inputs` (and `example_kwargs`).

    `model` is an nn.Module, a ModuleGraph, a torch.export.ExportedProgram (exported in
    eval mode; its own example inputs serve when none are given) or the path of a .pt2
    file holding only a program's graph, whose weights then come from `checkpoint`.

    Returns a CompiledModule whose calls give the same outputs as `model` in eval mode.
    The model's own training/eval flags are left as they were. With
    CompileConfig(allow_training=True) the model is also compiled as it runs in training
    mode, and the module's train() switches its calls to that program, recorded by autograd. A ModuleGraph is compiled
    as the module that runs it. `devices` names where regions may compute: "auto" (the
    CPU and every CUDA or XPU device found), "cpu", names of the virtual devices declared
    in `machine`, or devices a backend finds ("cuda:0", a plugin's "kind:0"), whose link
    and region times are measured.

    With `checkpoint` (a .safetensors file, a list of them, a *.safetensors.index.json or
    a folder holding one), the weights are read from there in place, never all in RAM at
    once: `model` may be built on the meta device and its own weights are not used.
    """
    config = _as_config(config)
    exported = exported_source(model, checkpoint)
    args, kwargs = example_of(exported, example_inputs, example_kwargs)
    if config.allow_training:
        check_trainable(exported, checkpoint, config)
    if checkpoint is not None:
        source = exported if exported is not None else check_model(model)
        return compile_from_checkpoint(source, args, kwargs, config, checkpoint, devices, machine)
    # An exported program's own module holds its weights (the same tensors) and runs its graph.
    model = exported.module() if exported is not None else model
    # Accelerators are probed only for a plan that may use one: probing creates CUDA contexts.
    budgets = resolve_budgets(config, devices=discover_devices(accelerators=names_accelerator(devices)))
    hold_torch_threads(budgets.cpus)
    model = check_model(compose(model, args, kwargs) if isinstance(model, ModuleGraph) else model)
    model_name = "ExportedProgram" if exported is not None else type(model).__qualname__
    check_weights_present(model)
    # A RAM budget given that the weights exceed: they stream from the weights cache, and
    # the streaming program (not the placement) holds RAM to the budget.
    over_budget = config.ram_budget_bytes is not None and weight_bytes(model) > budgets.ram.amount
    streaming = over_budget and config.allow_disk_streaming
    if streaming and config.allow_training:
        raise UnsupportedFeatureError(
            "training (allow_training=True)",
            f"weights streamed from disk (ram_budget_bytes={config.ram_budget_bytes} is below the weights' "
            f"{weight_bytes(model)} bytes)",
            "raise the RAM budget so that the weights stay in memory",
        )
    ram = UNBOUNDED if streaming else budgets.ram.amount
    plan_machine = resolve_machine(devices, check_machine(machine), ram, named_accelerators(devices, budgets))
    if config.activation_budget_bytes is not None and not plan_machine.is_cpu_only:
        raise UnsupportedError("tt.compile: activations spill from CPU regions only today; use devices='cpu'")
    if not streaming:
        check_fits(weight_bytes(model), budgets, streaming_refused=over_budget)  # before export: the heavy work

    stages = (
        STAGES[:2]
        + ["compile regions"]
        + STAGES[2:]
        + (["stream"] if streaming else [])
        + (["training"] if config.allow_training else [])
    )
    build = _Build(model, model_name, args, kwargs, config, budgets, plan_machine)
    with CompileProgress(stages) as progress:
        with progress.stage("export"):
            captured = functional_program(exported) if exported is not None else capture_model(model, args, kwargs)
        program = normalize(captured)
        compiled, placement = build.compiled(program, progress.stage, streaming, progress=progress)
        if config.checks_numerics:
            with progress.stage("check numerics"):
                compiled.numerics_note = check_numerics(compiled, program, args, kwargs, config)
        if config.allow_training:
            with progress.stage("training"):
                compiled.attach_training(build.training_twin())
    log.info(
        "compiled %s: %d region(s) on %s, direct path %s, predicted %.3f ms per call",
        model_name,
        compiled.region_count,
        ", ".join(sorted(set(compiled.region_devices))),
        "taken" if compiled.uses_direct_path else "not taken",
        placement.chosen.measures.latency_s * 1e3,
    )
    return compiled


class _Build:
    """Partitions, profiles, plans and builds a captured program of one model, for tt.compile."""

    def __init__(self, model, model_name, args, kwargs, config, budgets, plan_machine) -> None:
        self.model, self.model_name, self.args, self.kwargs = model, model_name, args, kwargs
        self.config, self.budgets, self.plan_machine = config, budgets, plan_machine

    def compiled(self, program, stage, streaming: bool = False, training: bool = False, progress=None):
        """The CompiledModule of `program` and its placement; `stage` marks the progress
        (`progress`, where given, shows each region compiling). `training`: a program
        captured in training mode, for calls autograd records (its regions run eagerly)."""
        model, config, budgets = self.model, self.config, self.budgets
        signature = InputSignature(self.args, self.kwargs)
        with stage("partition"):
            # A region per parameter group where its weights move on every call: each streams alone,
            # and each Linear may be split between the cpu and a device.
            fine = streaming or self.plan_machine.shares_layers(weight_bytes(model))
            layers = layer_paths(model) | (parameter_owners(program) if fine else frozenset())
            regions = partition(program, layers, config.max_region_nodes, innermost=fine)
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
                plan_machine = self.plan_machine.profiled(runner, flat)
        with stage("plan"):
            objective = ObjectiveFunction.make(
                config.objective, config.objective_weights, plan_machine.slowest_link_bytes_per_s()
            )
            costs = region_costs(regions, seconds)
            cpu_slots = config.max_concurrent_regions or budgets.cpus.amount
            placement = place(runner, regions, costs, plan_machine, objective, budgets.cpus.amount, cpu_slots, training)
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
                runs_model_forward=not training and not backends.forwards,
                model_name=self.model_name,
                signature=signature,
                program=program,
                regions=regions,
                plan=plan,
                config=config,
                cpu_seconds=seconds,
                runner=runner,
                streamed=streamed,
                ram_budget_bytes=budgets.ram.amount,
                region_backends=backends,
            )
        return compiled, placement

    def _pack_room_bytes(self, streaming: bool) -> int:
        """The RAM that packed copies of weights may take (runtime/packed_weights.py) in a
        CPU plan whose weights stay the model's own tensors; none where they stream or may
        go to a device."""
        if streaming or not self.plan_machine.is_cpu_only:
            return 0
        return pack_room_bytes(self.budgets.ram.amount, weight_bytes(self.model))

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
            self.config.region_backend != INDUCTOR
            and len(regions) == 1
            and bool(backends.forwards)
            and not streaming
            and self.plan_machine.is_cpu_only
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


def check_trainable(exported, checkpoint, config: CompileConfig) -> None:
    """UnsupportedFeatureError for what allow_training cannot be combined with yet."""
    feature = "training (allow_training=True)"
    if exported is not None:
        raise UnsupportedFeatureError(
            feature,
            "an exported program as the model (captured in eval mode, with no model code to capture again)",
            "pass the nn.Module itself",
        )
    if checkpoint is not None:
        raise UnsupportedFeatureError(
            feature, "weights read in place from a checkpoint (checkpoint=)", "load the weights into the model"
        )
    if config.activation_budget_bytes is not None:
        raise UnsupportedFeatureError(
            feature,
            f"an activation spill budget (activation_budget_bytes={config.activation_budget_bytes})",
            "leave activation_budget_bytes unset",
        )


def compile_modules(
    modules: Sequence[nn.Module],
    example_inputs: tuple | list | torch.Tensor = (),
    names: Sequence[str] | None = None,
    config: CompileConfig | None = None,
    devices: str | list[str] = "auto",
    *,
    example_kwargs: dict[str, Any] | None = None,
    machine: VirtualDevice | Sequence[VirtualDevice] | None = None,
) -> CompiledModule:
    """Compiles `modules` run in series: the first takes the example inputs, each next one the previous output.

    `names` (default m0, m1, ...) name the nodes, and so prefix the parameter names.
    """
    graph = series(modules, names, len(_as_args(example_inputs)), list(_as_kwargs(example_kwargs)))
    return compile(graph, example_inputs, config, devices, example_kwargs=example_kwargs, machine=machine)


def example_of(exported, example_inputs: object, example_kwargs: object) -> tuple[tuple, dict]:
    """The example inputs given, else an exported program's own (args, kwargs)."""
    args, kwargs = _as_args(example_inputs), _as_kwargs(example_kwargs)
    if exported is not None and not args and not kwargs:
        if exported.example_inputs is None:
            raise InvalidArgumentError(
                "tt.compile: the exported program carries no example inputs; pass example_inputs (and example_kwargs)"
            )
        args, kwargs = exported.example_inputs
    return args, kwargs


def check_weights_present(model: nn.Module) -> None:
    """InvalidArgumentError for a model whose weights are on the meta device: they have no values."""
    meta = next((name for name, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta), None)
    if meta is not None:
        raise InvalidArgumentError(
            f"tt.compile: the model's weights are on the meta device ({meta!r}, ...), so they have no values; "
            "pass checkpoint= (a safetensors file, a list of them, an index or a folder) to read them from"
        )


def _as_args(example_inputs: object) -> tuple:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs)
    raise InvalidArgumentError(
        f"tt.compile: example_inputs: expected a tuple of inputs or a tensor, got {type(example_inputs).__name__}"
    )


def _as_kwargs(example_kwargs: object) -> dict:
    if example_kwargs is None:
        return {}
    if not isinstance(example_kwargs, dict) or not all(isinstance(k, str) for k in example_kwargs):
        raise InvalidArgumentError(
            f"tt.compile: example_kwargs: expected a dict with str keys, got {type(example_kwargs).__name__}"
        )
    return dict(example_kwargs)


def _as_config(config: object) -> CompileConfig:
    if config is None:
        return CompileConfig()
    if not isinstance(config, CompileConfig):
        raise InvalidArgumentError(f"tt.compile: config: expected a tt.CompileConfig, got {type(config).__name__}")
    return config
