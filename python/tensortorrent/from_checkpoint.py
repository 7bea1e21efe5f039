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

import functools
import logging
import os
from dataclasses import dataclass

import torch
from torch import nn

from .artifact.program_archive import load_program
from .capture import InputSignature, normalize
from .capture.export import check_eval_semantics
from .capture.weightless import capture_weightless, exported_weightless
from .config import CompileConfig
from .errors import InvalidArgumentError, NotFoundError, StorageError, UnsupportedFeatureError
from .objective import ObjectiveFunction
from .observe.progress import CompileProgress
from .partition import layer_paths, parameter_owners, partition
from .planning import build_plan
from .planning.costs import region_costs, roofline_seconds
from .planning.placement import place
from .planning.streaming import Layout
from .planning.weights_on_disk import WeightsOnDisk
from .runtime import CompiledModule
from .runtime.executable import executable
from .runtime.program_runner import ProgramRunner
from .runtime.region_backends import EAGER, compile_regions
from .runtime.streamed_weights import PROFILED_COSTS, stream_weights
from .storage.checkpoint import open_checkpoint
from .storage.checkpoint_weights import weights_in_checkpoint, with_checksums
from .storage.name_matching import describe_files
from .target import Target, resolve_target

log = logging.getLogger(__name__)

STAGES = ["checkpoint", "export", "partition", "plan", "stream"]


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
    if config.validate_numerics:
        raise UnsupportedFeatureError(
            "validate_numerics=True",
            "weights read in place from a checkpoint (eager PyTorch would need them all in memory)",
            "pass validate_numerics=False",
        )
    model_name = type(model).__qualname__
    stages = STAGES + ["compile regions"]
    with CompileProgress(stages) as progress:
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
        compiled = streamed_module(
            StreamedSource(model, model_name, program, signature, weights, checksum=True),
            layer_paths(model),
            target,
            signature.flatten(args, kwargs),
            config,
            progress,
            f"weights read in place from checkpoint {describe_files(files.files)}",
        )
    if config.region_backend != EAGER:
        compiled.numerics_note = "not checked: the weights are read from a checkpoint, not held in memory"
    return compiled


@dataclass(frozen=True)
class StreamedSource:
    """A program whose weights stay on disk: a checkpoint's (`checksum`: read the files once
    to record each range's CRC-32C), or an artifact's loaded under a RAM budget (`verify`:
    check its file's chunk digests first)."""

    model: nn.Module  # the module tree the weights' names come from
    model_name: str
    program: object
    signature: InputSignature
    weights: WeightsOnDisk
    checksum: bool = False
    verify: bool = False


def streamed_module(
    source: StreamedSource, layers: frozenset[str], target: Target, flat: list, config, progress, origin: str
) -> CompiledModule:
    """The CompiledModule of `source`'s program, its weights streamed within the RAM budget
    onto `target`'s devices: on devices, placed first (place_streamed); `flat` are inputs of the
    compiled shapes; `progress` shows the stages partition, compile regions, plan and
    stream; `origin` begins explain()'s line on where the module came from."""
    program, weights = source.program, source.weights
    machine, budgets = target.streamed(), target.budgets
    with progress.stage("partition"):
        # Weights stream a parameter group at a time: every module owning parameters is a layer.
        regions = partition(program, layers | parameter_owners(program), config.max_region_nodes, innermost=True)
    with progress.stage("compile regions"):
        backends = compile_regions(program, regions, config.region_backend, on_region=progress.region_compiling)
    with progress.stage("plan"):
        placement = None
        if not machine.is_cpu_only:
            placement = place_streamed(program, regions, weights, machine, flat, config, budgets)
        plan = build_plan(regions, config, cpus=budgets.cpus.amount, placement=placement)
    with progress.stage("stream"):
        if source.checksum:
            weights = with_checksums(weights, budgets.ram.amount)
        streamed = stream_weights(
            program,
            regions,
            weights,
            config,
            plan.max_concurrent,
            verify=source.verify,
            budget_bytes=budgets.ram.amount,
            example=flat,
            layout=Layout.of_placement(placement) if placement is not None else None,
            backends=backends,
        )
    costs = "measured by a profiling call" if streamed.costs == PROFILED_COSTS else "from a roofline, not measured"
    log.info(
        "compiled %s (%s): %d region(s), predicted %.3f ms per call",
        source.model_name,
        origin,
        len(regions),
        streamed.predicted_s() * 1e3,
    )
    return CompiledModule(
        model=source.model,
        runs_model_forward=False,
        model_name=source.model_name,
        signature=source.signature,
        config=config,
        executable=executable(
            program,
            regions,
            plan,
            config,
            backends=backends,
            streamed=streamed,
            origin=f"{origin}; region costs {costs}",
        ),
    )


def place_streamed(program, regions, weights: WeightsOnDisk, machine, flat: list, config, budgets):
    """The placement on `machine` of a program whose weights stay on disk (a checkpoint's,
    or an artifact's loaded under a RAM budget; see the module's docstring)."""
    runner = ProgramRunner(program, regions)
    # The weights are the checkpoint's: None in the runner, read per region where profiled.
    runner.rebind([None if slot in weights.ranges else value for slot, value in enumerate(runner.bound_values)])
    machine = machine.profiled(runner, flat, functools.partial(read_weight, weights))
    roofline = [roofline_seconds(region, cost) for region, cost in zip(regions, region_costs(regions))]
    objective = ObjectiveFunction.make(config.objective, config.objective_weights, machine.slowest_link_bytes_per_s())
    cpu_slots = config.max_concurrent_regions or budgets.cpus.amount
    return place(runner, regions, region_costs(regions, roofline), machine, objective, budgets.cpus.amount, cpu_slots)


def read_weight(weights: WeightsOnDisk, slot: int) -> torch.Tensor:
    """Bound slot `slot`'s tensor, read from its file range into RAM."""
    place = weights.ranges[slot]
    data = bytearray(place.nbytes)
    with open(weights.path_of(place), "rb") as file:
        file.seek(place.offset)
        if file.readinto(data) != place.nbytes:
            raise StorageError(f"{weights.path_of(place)}: {place.nbytes} bytes at {place.offset} could not be read")
    return torch.frombuffer(data, dtype=torch.uint8).view(place.dtype).reshape(place.shape)
