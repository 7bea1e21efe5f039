"""compiled.export_pipeline: a compiled program as pipeline stages that
torch.distributed.pipelining runs, one process (rank) per stage, launched by torchrun.

The directory holds `pp_plan.json` (the stages: their regions, inputs and outputs,
weights, predicted times and boundary bytes; the microbatches; the schedule; the link
speed assumed), one TensorTorrent artifact per stage (`stage_<k>/`: its program and only
its weights, with their digests), `inputs.safetensors` (a batch to run: the default
input), and `torchrun.sh`, the command that runs it on this machine.

The compiled shapes are one microbatch: a pipeline call takes `n_microbatches` of them
stacked along the first dimension of every input, and its outputs are the microbatches'
outputs stacked the same way. In pp_plan.json the model's inputs and outputs have the
whole batch's shapes, each stage's inputs and outputs one microbatch's.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import stat

import torch

from ..api import compile as compile_module
from ..artifact.layout import MANIFEST
from ..artifact.publish import publish_directory
from ..errors import ArgumentValueError, UnsupportedFeatureError
from ..hardware.loopback import loopback_bytes_per_s
from ..planning.costs import measure_cpu_seconds
from ..storage.safetensors_file import read_slot
from ..version import __version__
from .cuts import Stage, check_stage_count, plan_stages
from .stage_module import StageModule
from .tensor_files import save_tensors

PLAN = "pp_plan.json"
INPUTS = "inputs.safetensors"
LAUNCHER = "torchrun.sh"
TORCH_REQUIRED = "2.4"  # torch.distributed.pipelining's PipelineStage and schedules
# Before 2.13 a training PipelineStage asks every value it receives to take a gradient,
# which a bool mask or integer ids crossing a cut cannot (pytorch/pytorch#183024).
TRAINING_TORCH_REQUIRED = "2.13"


def torch_release(version: str) -> tuple[int, int]:
    """(major, minor) of a torch version string ("2.11.0+cu130" -> (2, 11))."""
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def export_pipeline(
    compiled,
    directory: str | os.PathLike,
    num_stages: int,
    n_microbatches: int | None = None,
    link_bytes_per_s: float | None = None,
    training: bool = False,
) -> str:
    """Writes the pipeline of `compiled` into `directory` (see the module docstring) and
    returns the torchrun command that runs it. `link_bytes_per_s`: the speed between
    ranks the stages are balanced for (default: this machine's TCP loopback, measured).
    `training`: the stages of the program captured in training mode (a module compiled
    with allow_training=True), for the 1F1B schedule with a loss on the last stage."""
    source = _source_of(compiled, training)
    runner = source._runner
    _check_exportable(compiled, runner)
    check_stage_count(num_stages)
    n_microbatches = num_stages if n_microbatches is None else n_microbatches
    _check_microbatches(num_stages, n_microbatches)
    link_source = "given"
    if link_bytes_per_s is None:
        link_bytes_per_s, link_source = loopback_bytes_per_s(), "measured: TCP over 127.0.0.1"
    elif isinstance(link_bytes_per_s, bool) or not isinstance(link_bytes_per_s, (int, float)) or link_bytes_per_s <= 0:
        raise ArgumentValueError(f"export_pipeline: link_bytes_per_s: expected bytes/s > 0, got {link_bytes_per_s!r}")
    batch = _example_batch(compiled.input_signature, n_microbatches)
    microbatch = [value.chunk(n_microbatches)[0] for value in batch.values()]
    on_disk = source.artifact_parts().weights_on_disk
    seconds = _region_seconds(source, runner, microbatch, streamed=on_disk is not None)
    stages = plan_stages(runner, seconds, num_stages, float(link_bytes_per_s))
    required = _torch_required(runner, stages, training)
    directory = os.path.abspath(os.fspath(directory))
    command = f"torchrun --standalone --nproc-per-node={num_stages} -m tensortorrent.pipeline {shlex.quote(directory)}"

    def write(staging: str) -> None:
        described = []
        # The program runs inline on the example microbatch, a stage at a time: each stage
        # is compiled on the values that reach its cut, with its own weights alone in RAM.
        call = runner.new_call(microbatch)
        with torch.no_grad():
            for index, stage in enumerate(stages):
                example = tuple(call.env[slot] for slot in stage.inputs)
                weights = _stage_weights(runner, stage, on_disk)
                call.env[: runner.bound_count] = [weights.get(slot) for slot in range(runner.bound_count)]
                described.append(_write_stage(source, runner, stage, index, example, weights, staging))
                for region in range(stage.first, stage.end):
                    call.run_region(region)
        save_tensors(batch, os.path.join(staging, INPUTS))
        plan = _plan_json(compiled, runner, stages, described, batch, n_microbatches, link_bytes_per_s, link_source)
        plan.update(training=training, schedule="1F1B" if training else "GPipe", torch_required=required)
        plan["command"] = command
        _write(os.path.join(staging, PLAN), json.dumps(plan, indent=2) + "\n")
        launcher = os.path.join(staging, LAUNCHER)
        _write(launcher, _launcher_script(num_stages))
        os.chmod(launcher, os.stat(launcher).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    os.makedirs(os.path.dirname(directory), exist_ok=True)
    publish_directory(directory, write, marker=PLAN)
    return command


def _source_of(compiled, training: bool):
    """The compiled program the stages come from: the module's, or its training twin's."""
    if not isinstance(training, bool):
        raise ArgumentValueError(f"export_pipeline: training: expected a bool, got {training!r}")
    if not training:
        return compiled
    if compiled._trainer is None:
        raise UnsupportedFeatureError(
            "a training pipeline (training=True)",
            "a module compiled for inference",
            "compile with tt.CompileConfig(allow_training=True)",
        )
    return compiled._trainer


def _torch_required(runner, stages, training: bool) -> str:
    """The oldest torch whose pipelining runs these stages; raises where this one cannot."""
    crossing = sorted({slot for stage in stages[1:] for slot in stage.inputs if not _floating(runner, slot)})
    if not training or not crossing:
        return TORCH_REQUIRED
    if torch_release(torch.__version__) < torch_release(TRAINING_TORCH_REQUIRED):
        values = ", ".join(f"v{slot} ({str(runner.slot_meta[slot][0]).removeprefix('torch.')})" for slot in crossing)
        raise UnsupportedFeatureError(
            f"a training pipeline whose stages receive values that take no gradient ({values})",
            f"torch {torch.__version__}'s pipelining, which asks every received value to take one",
            f"torch >= {TRAINING_TORCH_REQUIRED} runs it",
        )
    return TRAINING_TORCH_REQUIRED


def _floating(runner, slot: int) -> bool:
    dtype, _ = runner.slot_meta[slot]
    return dtype.is_floating_point or dtype.is_complex


def _check_exportable(compiled, runner) -> None:
    leaves = compiled.input_signature.leaves
    odd = [leaf.path for leaf in leaves if leaf.shape is None or not leaf.shape]
    if odd:
        raise ArgumentValueError(
            f"export_pipeline: every input must be a tensor with a batch dimension to split into microbatches; "
            f"{', '.join(odd)} is not"
        )
    if runner.mutations:
        raise UnsupportedFeatureError("export_pipeline", "a model that updates its own buffers")
    if any(slot is None or runner.slot_meta[slot] is None for slot, _ in runner.outputs):
        raise ArgumentValueError("export_pipeline: every output of the model must be a tensor to send between ranks")


def _check_microbatches(num_stages: int, n_microbatches: object) -> None:
    if isinstance(n_microbatches, bool) or not isinstance(n_microbatches, int):
        raise ArgumentValueError(f"export_pipeline: n_microbatches: expected an int, got {n_microbatches!r}")
    if n_microbatches < num_stages:
        raise ArgumentValueError(
            f"export_pipeline: n_microbatches={n_microbatches} is fewer than the {num_stages} stages; "
            "every stage needs a microbatch of its own to work on"
        )


def _example_batch(signature, n_microbatches: int) -> dict[str, torch.Tensor]:
    """A batch of `n_microbatches` microbatches of the compiled shapes, by input path:
    seeded normal values for floating inputs, zeros otherwise (valid token ids, masks)."""
    generator = torch.Generator().manual_seed(0)
    batch = {}
    for leaf in signature.leaves:
        shape = (leaf.shape[0] * n_microbatches, *leaf.shape[1:])
        if leaf.dtype.is_floating_point:
            batch[leaf.path] = torch.randn(shape, generator=generator).to(leaf.dtype)
        else:
            batch[leaf.path] = torch.zeros(shape, dtype=leaf.dtype)
    return batch


def _region_seconds(source, runner, microbatch: list[torch.Tensor], streamed: bool) -> list[float]:
    """Each region's measured CPU time; measured now where the compile did not, or, when
    weights stream from disk (and cannot all be in RAM to run), estimated from its FLOPs
    at the rate of the regions that were measured (1 GFLOP/s where none were)."""
    costs = source.region_costs
    seconds = [cost.cpu_seconds for cost in costs]
    if all(s is not None for s in seconds):
        return seconds
    if not streamed:
        return measure_cpu_seconds(runner, microbatch)
    known = [(c.flops, c.cpu_seconds) for c in costs if c.cpu_seconds]
    rate = sum(f for f, _ in known) / sum(t for _, t in known) if known and sum(f for f, _ in known) else 1e9
    return [c.cpu_seconds if c.cpu_seconds is not None else max(c.flops, 1) / rate for c in costs]


def _stage_weights(runner, stage: Stage, on_disk) -> dict[int, torch.Tensor]:
    """The bound tensors a stage's regions read: the program's own, or read from the file
    they stream from (a stage's at a time, so the export holds one stage's weights)."""
    slots = sorted({s for k in runner.kernels[stage.first : stage.end] for s in k.in_slots if s < runner.bound_count})
    values = runner.bound_values
    return {slot: values[slot] if values[slot] is not None else read_slot(on_disk, slot) for slot in slots}


def _write_stage(source, runner, stage: Stage, index: int, example: tuple, weights: dict, staging: str) -> dict:
    bound = source.artifact_parts().program.bound
    module = StageModule(runner, stage, {s: (bound[s].names[0], t, bound[s].kind) for s, t in weights.items()}).eval()
    stage_compiled = compile_module(module, example, devices="cpu")
    name = f"stage_{index}"
    stage_compiled.save(os.path.join(staging, name))
    with open(os.path.join(staging, name, MANIFEST), "rb") as manifest:
        digest = hashlib.sha256(manifest.read()).hexdigest()
    return {
        "index": index,
        "directory": name,
        "regions": [source._regions[r].name for r in range(stage.first, stage.end)],
        "inputs": [_value(runner, slot) for slot in stage.inputs],
        "outputs": [_value(runner, slot) for slot in stage.outputs],
        "parameter_bytes": module.weight_bytes,
        "weight_names": module.weight_names(),
        "compute_s": stage.compute_s,
        "boundary_bytes": stage.boundary_bytes,
        "predicted_s": stage.predicted_s,
        "manifest_sha256": digest,
    }


def _value(runner, slot: int, microbatches: int = 1) -> dict:
    """A value's name, dtype and shape (of one microbatch, or of `microbatches` of them)."""
    dtype, shape = runner.slot_meta[slot]
    shape = [shape[0] * microbatches, *shape[1:]]
    return {"name": f"v{slot}", "dtype": str(dtype).removeprefix("torch."), "shape": shape}


def plain_name(path: str) -> str:
    """An output's pytree path as a plain name: "['logits']" -> "logits", "[0][1]" -> "0.1"."""
    parts = [
        key or index or attribute for key, index, attribute in re.findall(r"\['([^']*)'\]|\[(\d+)\]|\.(\w+)", path)
    ]
    return ".".join(parts) or "output"


def _plan_json(compiled, runner, stages, described, batch, n_microbatches, link, link_source) -> dict:
    output_names = [plain_name(path) for path, _ in compiled.output_leaves()]
    return {
        "format": 1,
        "model": compiled.artifact_parts().model_name,
        "schedule": "GPipe",
        "num_stages": len(stages),
        "n_microbatches": n_microbatches,
        "link_bytes_per_s": link,
        "link": link_source,
        "exported_with": {"torch": torch.__version__, "tensortorrent": __version__},
        "inputs": [
            {"name": name, "dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape)}
            for name, value in batch.items()
        ],
        "outputs": [
            {**_value(runner, slot, n_microbatches), "name": name, "name_in_stage": f"v{slot}"}
            for name, (slot, _) in zip(output_names, runner.outputs)
        ],
        "predicted_s_per_microbatch": max(stage.predicted_s for stage in stages),
        "stages": described,
    }


def _launcher_script(num_stages: int) -> str:
    return (
        "#!/bin/sh\n"
        "# Runs this pipeline on this machine, one process per stage; arguments go on to the runner\n"
        "# (python -m tensortorrent.pipeline --help). Across machines, give torchrun --nnodes and\n"
        "# --rdzv-endpoint instead of --standalone.\n"
        f'exec torchrun --standalone --nproc-per-node={num_stages} -m tensortorrent.pipeline "$(dirname "$0")" "$@"\n'
    )


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)
