"""The runner of an exported pipeline, one process per stage under torchrun:
`python -m tensortorrent.pipeline DIR [--inputs FILE] [--outputs FILE]`.

Each rank checks what it is about to run (the torch version, the world size against the
stages, its stage's manifest digest; loading the stage's artifact checks its weights'
digests), loads its own stage only (a TensorTorrent program: under --ram-budget-bytes
its weights stream from disk), and takes part in the GPipe schedule. Rank 0 reads the
inputs; the last rank writes the outputs (safetensors, by the model's output names).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file

from ..artifact.layout import MANIFEST
from ..config import CompileConfig
from ..errors import ArgumentValueError, ArtifactError
from ..files import write_text_atomically
from .export import INPUTS, PLAN, TORCH_REQUIRED


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tensortorrent.pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="what export-pipeline wrote")
    parser.add_argument("--inputs", help=f"a safetensors file of the inputs (default: DIR/{INPUTS})")
    parser.add_argument("--outputs", help="where the last rank writes the outputs (default: DIR/outputs.safetensors)")
    parser.add_argument("--ram-budget-bytes", type=int, help="this rank's RAM budget: its stage's weights stream")
    parser.add_argument("--report", help="a JSON file per rank (RANK replaced): timings and peak memory")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="the most any step waits for a peer")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_torch(torch.__version__)
    plan = read_plan(args.directory)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    check_world(world, plan)
    baseline_rss = peak_rss_bytes()
    stage = load_stage(args.directory, plan, rank, args.ram_budget_bytes)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout_s))
    try:
        report = run(args, plan, stage, rank)
    finally:
        dist.destroy_process_group()
    if args.report:
        report.update(rank=rank, baseline_rss_bytes=baseline_rss, peak_rss_bytes=peak_rss_bytes())
        write_text_atomically(args.report.replace("RANK", str(rank)), json.dumps(report, indent=2) + "\n")
    return 0


def check_torch(version: str) -> None:
    found = tuple(int(part) for part in version.split("+")[0].split(".")[:2])
    if found < TORCH_REQUIRED:
        raise RuntimeError(
            f"tensortorrent.pipeline needs torch >= {'.'.join(map(str, TORCH_REQUIRED))} "
            f"(torch.distributed.pipelining), found {version}"
        )


def read_plan(directory: str) -> dict:
    path = os.path.join(directory, PLAN)
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except FileNotFoundError:
        raise ArtifactError(f"{path}: missing; is {directory} what export-pipeline wrote?") from None
    except json.JSONDecodeError as error:
        raise ArtifactError(f"{path}: not valid JSON ({error})") from None


def check_world(world: int, plan: dict) -> None:
    if world != plan["num_stages"]:
        raise ArgumentValueError(
            f"the pipeline has {plan['num_stages']} stages and this run has a world size of {world}; "
            f"run one process per stage (torchrun --nproc-per-node={plan['num_stages']})"
        )


def load_stage(directory: str, plan: dict, rank: int, ram_budget_bytes: int | None):
    """This rank's stage: its artifact, its manifest checked against the plan's digest."""
    from ..artifact import load_compiled

    described = plan["stages"][rank]
    stage_dir = os.path.join(directory, described["directory"])
    with open(os.path.join(stage_dir, MANIFEST), "rb") as manifest:
        digest = hashlib.sha256(manifest.read()).hexdigest()
    if digest != described["manifest_sha256"]:
        raise ArtifactError(
            f"{stage_dir}: its manifest's SHA-256 is {digest}, the plan expects {described['manifest_sha256']}; "
            "the stage is not the one exported"
        )
    config = CompileConfig(ram_budget_bytes=ram_budget_bytes) if ram_budget_bytes is not None else None
    return load_compiled(stage_dir, config=config)


def run(args, plan: dict, compiled, rank: int) -> dict:
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    described = plan["stages"][rank]
    example = tuple(torch.zeros(value["shape"], dtype=getattr(torch, value["dtype"])) for value in described["inputs"])
    num_stages, last = plan["num_stages"], rank == plan["num_stages"] - 1
    stage = PipelineStage(compiled, rank, num_stages, torch.device("cpu"), input_args=example)
    schedule = ScheduleGPipe(stage, n_microbatches=plan["n_microbatches"])
    inputs = read_inputs(args.inputs or os.path.join(args.directory, INPUTS), plan) if rank == 0 else []
    start = time.perf_counter()
    with torch.no_grad():
        outputs = schedule.step(*inputs)
    seconds = time.perf_counter() - start
    if last:
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        names = [output["name"] for output in plan["outputs"]]
        target = args.outputs or os.path.join(args.directory, "outputs.safetensors")
        save_atomically({name: value.contiguous() for name, value in zip(names, outputs)}, target)
    return {
        "stage": rank,
        "step_s": seconds,
        "weights_streamed": compiled.streams_weights,
        "stage_parameter_bytes": described["parameter_bytes"],
    }


def read_inputs(path: str, plan: dict) -> list[torch.Tensor]:
    """The inputs by the plan's names, checked against its dtypes and shapes."""
    try:
        tensors = load_file(path)
    except FileNotFoundError:
        raise ArgumentValueError(f"--inputs {path}: no such file") from None
    expected = plan["inputs"]
    missing = [value["name"] for value in expected if value["name"] not in tensors]
    if missing:
        raise ArgumentValueError(f"--inputs {path}: lacks {missing}; expected {[v['name'] for v in expected]}")
    inputs = []
    for value in expected:
        tensor = tensors[value["name"]]
        if list(tensor.shape) != value["shape"] or str(tensor.dtype).removeprefix("torch.") != value["dtype"]:
            raise ArgumentValueError(
                f"--inputs {path}: {value['name']} is {str(tensor.dtype).removeprefix('torch.')} of shape "
                f"{list(tensor.shape)}, expected {value['dtype']} of shape {value['shape']} "
                f"({plan['n_microbatches']} microbatches)"
            )
        inputs.append(tensor)
    return inputs


def save_atomically(tensors: dict[str, torch.Tensor], path: str) -> None:
    partial = f"{path}.partial-{os.getpid()}"
    try:
        save_file(tensors, partial)
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


if __name__ == "__main__":
    sys.exit(main())
