"""tt.compile: capture, partition, plan and build a CompiledModule; tt.compile_modules for a series."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .build import STAGES, build, compiled_module, training_twin
from .capture import InputSignature, capture_model, normalize
from .capture.export import check_model, functional_program
from .capture.module_graph import ModuleGraph, checked, series
from .compression.accuracy import measured_accuracy
from .compression.checkpoint import checkpoint_accuracy, compressed_for
from .config import CompileConfig
from .errors import InvalidArgumentError, UnsupportedFeatureError
from .from_checkpoint import compile_from_checkpoint, exported_source
from .hardware.virtual import VirtualDevice
from .observe.progress import CompileProgress
from .partition import layer_paths
from .planning.fit import check_fits, weight_bytes
from .runtime import CompiledModule
from .runtime.numerics_check import check_numerics
from .source import Source
from .storage.checkpoint import Checkpoint, open_checkpoint
from .target import Target, resolve_target


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
    original = model
    if config.weight_format is not None:
        checkpoint = open_checkpoint(checkpoint) if checkpoint is not None else None
        model = compressible(model, exported, config, checkpoint)
    if checkpoint is not None:
        source = exported if exported is not None else check_model(model)
        compiled = compile_from_checkpoint(source, args, kwargs, config, checkpoint, devices, machine)
        if config.weight_format is not None:
            compiled.accuracy_note = checkpoint_accuracy(checkpoint.files)
        return compiled
    # An exported program's own module holds its weights (the same tensors) and runs its graph.
    model = exported.module() if exported is not None else model
    compiled = compile_on_target(model, args, kwargs, config, resolve_target(devices, machine, config), exported)
    if config.weight_format is not None:
        compiled.accuracy_note = measured_accuracy(compiled, original, args, kwargs)
    return compiled


def compile_on_target(
    model: nn.Module | ModuleGraph,
    args: tuple,
    kwargs: dict,
    config: CompileConfig,
    target: Target,
    exported: torch.export.ExportedProgram | None = None,
    shared: dict[str, torch.Tensor] | None = None,
) -> CompiledModule:
    """The compiled module of `model`, its weights in memory, for `target` (several
    programs of one model, as generation compiles, share one target); `exported`: the
    program `model` is the module of, not captured again; `shared`: weights by name that
    other programs hold in RAM too (Source.sharing)."""
    budgets = target.budgets
    model = check_model(checked(model, args, kwargs) if isinstance(model, ModuleGraph) else model)
    model_name = "ExportedProgram" if exported is not None else type(model).__qualname__
    check_weights_present(model)
    # Under a RAM budget given, the planner keeps the weights in RAM where that whole plan
    # fits, else streams them from the weights cache (build.build).
    over_budget = config.ram_budget_bytes is not None and weight_bytes(model) > budgets.ram.amount
    if over_budget and config.allow_disk_streaming and config.allow_training:
        raise UnsupportedFeatureError(
            "training (allow_training=True)",
            f"weights streamed from disk (ram_budget_bytes={config.ram_budget_bytes} is below the weights' "
            f"{weight_bytes(model)} bytes)",
            "raise the RAM budget so that the weights stay in memory",
        )
    may_stream = config.ram_budget_bytes is not None and config.allow_disk_streaming and not config.allow_training
    if not may_stream:
        check_fits(weight_bytes(model), budgets, streaming_refused=over_budget)  # before export: the heavy work

    stages = ["export", *STAGES, *(["training"] if config.allow_training else [])]
    with CompileProgress(stages) as progress:
        with progress.stage("export"):
            captured = functional_program(exported) if exported is not None else capture_model(model, args, kwargs)
        source = Source(
            model,
            model_name,
            normalize(captured),
            InputSignature(args, kwargs),
            args,
            kwargs,
            layers=layer_paths(model),
            model_forward=True,
        ).sharing(shared)
        compiled = compiled_module(source, config, build(source, target, config, progress=progress))
        if config.checks_numerics:
            with progress.stage("check numerics"):
                compiled.numerics_note = check_numerics(compiled, source.program, args, kwargs, config)
        if config.allow_training:
            with progress.stage("training"):
                compiled.attach_training(training_twin(source, target, config))
    return compiled


def compressible(model, exported, config: CompileConfig, checkpoint: Checkpoint | None) -> nn.Module:
    """`model`'s copy with its weights in config.weight_format (from `checkpoint`, opened,
    where it is given), or UnsupportedFeatureError."""
    if exported is not None:
        raise UnsupportedFeatureError(
            f"weight_format={config.weight_format!r}",
            "an exported program or a .pt2 as the model (its layers are operations, no longer modules)",
            "pass the nn.Module itself",
        )
    return compressed_for(check_model(model), config.weight_format, config.group_size, checkpoint)


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
