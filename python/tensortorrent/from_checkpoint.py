"""tt.compile(model, ..., checkpoint=...): a model whose weights are read in place from a checkpoint.

The model is typically built on the meta device, so its weights were never in RAM. It is
captured with fake weights, its saved tensors are matched by name to the checkpoint's,
and the program runs on the data plane with the weights read from the checkpoint's own
files through the I/O engine: what fits the RAM budget once, the rest on every call.
The files are never copied, nor ever all in RAM at once. Region costs come from one
profiling call that streams each region's weights within the budget, as later calls do
(or, where a call would take too long, from a roofline: a measured GEMM rate and memory
bandwidth); explain() says which.

On devices (virtual ones, or accelerators), the placement is searched first, from the
regions' roofline times on the CPU, the virtual devices' declared speeds and each
accelerator's times measured there one region at a time, each region's weights read
from the checkpoint for it and let go after; then the weights stream where the
placement puts the regions: read from disk into RAM and copied to a device on every
call, or read once into a device where a region stays resident there.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from .artifact.program_archive import load_program
from .build import STAGES, build, compiled_module
from .capture import InputSignature, normalize
from .capture.export import check_eval_semantics
from .capture.weightless import capture_weightless, exported_weightless
from .config import CompileConfig
from .errors import InvalidArgumentError, NotFoundError, UnsupportedFeatureError
from .observe.progress import CompileProgress
from .partition import layer_paths
from .runtime import CompiledModule
from .runtime.region_backends import EAGER
from .source import Source
from .storage.checkpoint import Checkpoint, open_checkpoint
from .storage.checkpoint_weights import weights_in_checkpoint
from .storage.name_matching import describe_files
from .target import Target, resolve_target


def exported_source(model: object, checkpoint: object) -> torch.export.ExportedProgram | None:
    """`model` when it is an exported program; the program in a .pt2 file, opened as an
    artifact's program is (a graph with no tensor data, never unpickled), whose weights
    come from `checkpoint`; else None."""
    if isinstance(model, torch.export.ExportedProgram):
        return check_eval_semantics(model)
    if not isinstance(model, (str, os.PathLike)):
        return None
    path = os.fspath(model)
    if not path.endswith(".pt2"):
        raise InvalidArgumentError(f"tt.compile: a path must name an exported program's .pt2 file, got {path!r}")
    if checkpoint is None:
        raise InvalidArgumentError(
            f"tt.compile: {path}: a .pt2 program holds no weights TensorTorrent reads; pass checkpoint= too"
        )
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError as error:
        raise NotFoundError(f"tt.compile: {path}: no such .pt2 file") from error
    return check_eval_semantics(load_program(data, path))


def compile_from_checkpoint(
    model: nn.Module | torch.export.ExportedProgram,
    args: tuple,
    kwargs: dict,
    config: CompileConfig,
    checkpoint: object,
    devices: object,
    machine: object = None,
) -> CompiledModule:
    """The compiled module of `model` (or of an exported program, whose own weights are not
    used) with its weights in `checkpoint` (see the module's docstring), on `devices` (and
    the virtual devices `machine` declares), as tt.compile takes them."""
    target = resolve_target(devices, machine, config)
    return compile_checkpoint_on_target(model, args, kwargs, config, checkpoint, target)


def compile_checkpoint_on_target(
    model: nn.Module | torch.export.ExportedProgram,
    args: tuple,
    kwargs: dict,
    config: CompileConfig,
    checkpoint: object,
    target: Target,
    shared: dict[str, torch.Tensor] | None = None,
) -> CompiledModule:
    """compile_from_checkpoint for a resolved `target` (several programs of one model, as
    generation compiles, share one); `checkpoint` as tt.compile takes it, or opened already;
    `shared`: weights by name that other programs hold in RAM (Source.sharing)."""
    if config.validate_numerics:
        raise UnsupportedFeatureError(
            "validate_numerics=True",
            "weights read in place from a checkpoint (eager PyTorch would need them all in memory)",
            "pass validate_numerics=False",
        )
    model_name = type(model).__qualname__
    with CompileProgress(["checkpoint", "export", *STAGES]) as progress:
        with progress.stage("checkpoint"):
            files = checkpoint if isinstance(checkpoint, Checkpoint) else open_checkpoint(checkpoint)
        with progress.stage("export"):
            if isinstance(model, torch.export.ExportedProgram):
                exported, constants = exported_weightless(model, files)
                files = files.without(constants)  # not weights: the program holds them now
                model = exported.module()  # the module tree the weights' names come from
            else:
                exported = capture_weightless(model, args, kwargs)
            program = normalize(exported)
            source = Source(
                model,
                model_name,
                program,
                InputSignature(args, kwargs),
                args,
                kwargs,
                layers=layer_paths(model),
                on_disk=weights_in_checkpoint(program, files),
                values_in_ram=False,
                checksum=True,
                origin=f"weights read in place from checkpoint {describe_files(files.files)}",
            ).sharing(shared)
        compiled = compiled_module(source, config, build(source, target, config, progress=progress))
    if config.region_backend != EAGER:
        compiled.numerics_note = "not checked: the weights are read from a checkpoint, not held in memory"
    return compiled
