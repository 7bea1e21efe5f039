"""tt.compile(model, ..., checkpoint=...): a model whose weights are read in place from a checkpoint.

The model is typically built on the meta device, so its weights were never in RAM. It is
captured with fake weights, its saved tensors are matched by name to the checkpoint's,
and the program runs on the data plane with the weights read from the checkpoint's own
files through the I/O engine: what fits the RAM budget once, the rest on every call.
The files are never copied, nor ever all in RAM at once. Region costs come from one
profiling call that streams each region's weights within the budget, as later calls do
(or, where a call would take too long, from a roofline: a measured GEMM rate and memory
bandwidth); explain() says which.
"""

from __future__ import annotations

import logging
import os

import torch
from torch import nn

from .artifact.program_archive import load_program
from .artifact.streamed_weights import PROFILED_COSTS, stream_weights
from .capture import InputSignature, normalize
from .capture.weightless import capture_weightless, exported_weightless
from .config import CompileConfig
from .errors import InvalidArgumentError, NotFoundError, UnsupportedError
from .hardware import resolve_budgets
from .observe.progress import CompileProgress
from .partition import layer_paths, parameter_owners, partition
from .planning import build_plan
from .runtime import CompiledModule
from .storage.checkpoint import open_checkpoint
from .storage.checkpoint_weights import weights_in_checkpoint, with_checksums
from .storage.name_matching import describe_files

log = logging.getLogger(__name__)

STAGES = ["checkpoint", "export", "partition", "plan", "stream"]


def exported_source(model: object, checkpoint: object) -> torch.export.ExportedProgram | None:
    """`model` when it is an exported program; the program in a .pt2 file, opened as an
    artifact's program is (a graph with no tensor data, never unpickled), whose weights
    come from `checkpoint`; else None."""
    if isinstance(model, torch.export.ExportedProgram):
        return model
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
    return load_program(data, path)


def compile_from_checkpoint(
    model: nn.Module | torch.export.ExportedProgram,
    args: tuple,
    kwargs: dict,
    config: CompileConfig,
    checkpoint: object,
    devices: object,
) -> CompiledModule:
    """The compiled module of `model` (or of an exported program, whose own weights are not
    used) with its weights in `checkpoint` (see the module's docstring)."""
    if devices not in ("auto", "cpu"):
        raise UnsupportedError(
            f"tt.compile: a model compiled from a checkpoint runs on the CPU only today; got devices={devices!r}"
        )
    budgets = resolve_budgets(config)
    model_name = type(model).__qualname__
    with CompileProgress(STAGES) as progress:
        with progress.stage("checkpoint"):
            files = open_checkpoint(checkpoint)
        with progress.stage("export"):
            if isinstance(model, torch.export.ExportedProgram):
                exported, constants = exported_weightless(model, files)
                files = files.without(constants)  # not weights: the program holds them now
                model = exported.module()  # the module tree the weights' names come from
            else:
                exported = capture_weightless(model, args, kwargs)
            program = normalize(exported)
            signature = InputSignature(args, kwargs)
            weights = weights_in_checkpoint(program, files)
        with progress.stage("partition"):
            # Weights stream a parameter group at a time: every module owning parameters is a layer.
            layers = layer_paths(model) | parameter_owners(program)
            regions = partition(program, layers, config.max_region_nodes, innermost=True)
        with progress.stage("plan"):
            plan = build_plan(regions, config, cpus=budgets.cpus.amount)
        with progress.stage("stream"):
            weights = with_checksums(weights, budgets.ram.amount)
            streamed = stream_weights(
                program,
                regions,
                weights,
                config,
                plan.max_concurrent,
                verify=False,
                budget_bytes=budgets.ram.amount,
                example=signature.flatten(args, kwargs),
            )
    log.info(
        "compiled %s from %d checkpoint file(s): %d region(s), predicted %.3f ms per call",
        model_name,
        len(files.files),
        len(regions),
        streamed.predicted_s() * 1e3,
    )
    return CompiledModule(
        model=model,
        runs_model_forward=False,
        model_name=model_name,
        signature=signature,
        program=program,
        regions=regions,
        plan=plan,
        config=config,
        origin=(
            f"weights read in place from checkpoint {describe_files(files.files)}; region costs "
            + ("measured by a profiling call" if streamed.costs == PROFILED_COSTS else "from a roofline, not measured")
        ),
        streamed=streamed,
        ram_budget_bytes=budgets.ram.amount,
    )
