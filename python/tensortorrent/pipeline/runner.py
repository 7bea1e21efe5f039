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
from torch import nn

from ..artifact.layout import MANIFEST
from ..config import CompileConfig
from ..errors import ArgumentValueError, ArtifactError
from ..files import write_text_atomically
from .export import INPUTS, PLAN, TORCH_REQUIRED, torch_release
from .tensor_files import load_tensors, save_tensors


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tensortorrent.pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="what export-pipeline wrote")
    parser.add_argument("--inputs", help=f"a safetensors file of the inputs (default: DIR/{INPUTS})")
    parser.add_argument("--outputs", help="where the last rank writes the outputs (default: DIR/outputs.safetensors)")
    parser.add_argument("--ram-budget-bytes", type=int, help="this rank's RAM budget: its stage's weights stream")
    parser.add_argument("--report", help="a JSON file per rank (RANK replaced): timings and peak memory")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="the most any step waits for a peer")
    parser.add_argument("--repeat", type=int, default=1, help="inference steps on the batch (for timing)")
    training = parser.add_argument_group("a training pipeline (exported with training=True)")
    training.add_argument("--targets", help="a safetensors file holding `target`, what the loss compares with")
    training.add_argument("--loss", choices=sorted(LOSSES), default="mse", help="the loss on the last stage")
    training.add_argument("--steps", type=int, default=1, help="training steps on the batch")
    training.add_argument("--lr", type=float, default=0.0, help="SGD's learning rate (0: gradients only)")
    training.add_argument("--gradients", help="a safetensors file per rank (RANK replaced): its weights' gradients")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = read_plan(args.directory)
    check_torch(torch.__version__, plan.get("torch_required", TORCH_REQUIRED))
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


def check_torch(version: str, required: str) -> None:
    """`required`: the plan's torch_required ("2.4": pipelining; "2.13": a training
    pipeline passing values that take no gradient between stages)."""
    if torch_release(version) < torch_release(required):
        raise RuntimeError(f"this pipeline needs torch >= {required} (torch.distributed.pipelining), found {version}")


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
    from ..load import load_compiled

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
    inputs = read_inputs(args.inputs or os.path.join(args.directory, INPUTS), plan) if rank == 0 else []
    report = {
        "stage": rank,
        "weights_streamed": compiled.streams_weights,
        "stage_parameter_bytes": described["parameter_bytes"],
    }
    if plan.get("training"):
        return report | train(args, plan, compiled, rank, example, inputs)
    timed = TimedStage(compiled)
    stage = PipelineStage(timed, rank, num_stages, torch.device("cpu"), input_args=example)
    schedule = ScheduleGPipe(stage, n_microbatches=plan["n_microbatches"])
    steps, computing = [], []
    for _ in range(args.repeat):
        timed.seconds.clear()
        start = time.perf_counter()
        with torch.no_grad():
            outputs = schedule.step(*inputs)
        steps.append(time.perf_counter() - start)
        computing.append(list(timed.seconds))
    # What a step spends beyond computing its microbatches is sending, receiving and waiting for peers.
    report.update(step_s=steps, microbatch_compute_s=computing, predicted_microbatch_s=described["compute_s"])
    if last:
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        names = [output["name"] for output in plan["outputs"]]
        target = args.outputs or os.path.join(args.directory, "outputs.safetensors")
        save_tensors({name: value.contiguous() for name, value in zip(names, outputs)}, target)
    return report


def train(args, plan: dict, compiled, rank: int, example: tuple, inputs: list) -> dict:
    """`--steps` training steps of the 1F1B schedule over the batch, the loss on the last
    stage; weights tied across stages get the sum of their gradients on every rank that
    holds them before each step; `--gradients` writes this rank's after the last step."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    if compiled.streams_weights:
        raise ArgumentValueError("--ram-budget-bytes: a training pipeline's stages cannot stream their weights yet")
    num_stages, last = plan["num_stages"], rank == plan["num_stages"] - 1
    module = RecordedStage(compiled)
    stage = PipelineStage(module, rank, num_stages, torch.device("cpu"), input_args=example)
    loss = LOSSES[args.loss]
    schedule = Schedule1F1B(stage, n_microbatches=plan["n_microbatches"], loss_fn=lambda out, y: loss(_one(out), y))
    targets = read_targets(args.targets, plan) if last else None
    tied = tied_groups(plan)
    names = plan["stages"][rank]["weight_names"]
    parameters = dict(module.compiled.model.named_parameters())
    losses_per_step, seconds = [], []
    for _ in range(args.steps):
        module.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        start = time.perf_counter()
        if last:
            schedule.step(*inputs, target=targets, losses=losses)
        else:
            schedule.step(*inputs)
        sum_tied_gradients(tied, parameters, names)
        if args.lr:
            with torch.no_grad():
                for parameter in parameters.values():
                    if parameter.grad is not None:
                        parameter -= args.lr * parameter.grad
        seconds.append(time.perf_counter() - start)
        if last:
            losses_per_step.append(float(torch.stack(losses).detach().mean()))
    if args.gradients:
        gradients = {names[n]: p.grad.contiguous() for n, p in parameters.items() if p.grad is not None}
        save_tensors(gradients, args.gradients.replace("RANK", str(rank)))
    return {"step_s": seconds, "losses": losses_per_step}


class TimedStage(nn.Module):
    """A stage's compiled program, each call's duration kept (`seconds`)."""

    def __init__(self, compiled) -> None:
        super().__init__()
        self.compiled = compiled
        self.seconds: list[float] = []

    def forward(self, *args):
        start = time.perf_counter()
        outputs = self.compiled(*args)
        self.seconds.append(time.perf_counter() - start)
        return outputs


class RecordedStage(nn.Module):
    """A stage's compiled program run with autograd recording it (CompiledModule.run_recorded)."""

    def __init__(self, compiled) -> None:
        super().__init__()
        self.compiled = compiled

    def forward(self, *args):
        return self.compiled.run_recorded(*args)


def _one(outputs):
    return outputs[0] if isinstance(outputs, tuple) and len(outputs) == 1 else outputs


def _cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.flatten(0, -2), target.flatten())


LOSSES = {"mse": nn.functional.mse_loss, "cross_entropy": _cross_entropy}


def read_targets(path: str | None, plan: dict) -> torch.Tensor:
    if path is None:
        raise ArgumentValueError("a training pipeline needs --targets FILE (a safetensors file holding `target`)")
    try:
        tensors = load_tensors(path)
    except FileNotFoundError:
        raise ArgumentValueError(f"--targets {path}: no such file") from None
    if "target" not in tensors:
        raise ArgumentValueError(f"--targets {path}: holds {sorted(tensors)}, expected `target`")
    target = tensors["target"]
    batch = plan["inputs"][0]["shape"][0]
    if not target.shape or target.shape[0] != batch:
        raise ArgumentValueError(f"--targets {path}: `target` has shape {list(target.shape)}, expected {batch} rows")
    return target


def tied_groups(plan: dict) -> dict[str, object]:
    """Per model weight held by several stages, the process group of their ranks (every
    rank creates every group, in the same order, as torch.distributed requires)."""
    holders: dict[str, list[int]] = {}
    for stage in plan["stages"]:
        for name in dict.fromkeys(stage["weight_names"].values()):
            holders.setdefault(name, []).append(stage["index"])
    return {name: dist.new_group(ranks) for name, ranks in sorted(holders.items()) if len(ranks) > 1}


def sum_tied_gradients(groups: dict, parameters: dict[str, torch.Tensor], names: dict[str, str]) -> None:
    mine = {names[n]: p for n, p in parameters.items()}
    for name, group in groups.items():
        if name in mine:
            parameter = mine[name]
            if parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
            dist.all_reduce(parameter.grad, group=group)


def read_inputs(path: str, plan: dict) -> list[torch.Tensor]:
    """The inputs by the plan's names, checked against its dtypes and shapes."""
    try:
        tensors = load_tensors(path)
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


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


if __name__ == "__main__":
    sys.exit(main())
