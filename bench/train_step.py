"""One training step (forward, backward, Adam step) compiled with allow_training vs eager.

Workloads: GPT-2 small (12 layers, 768 wide, random weights from its config) at batch 4,
sequence 128, on the CPU; and the same model on a plan whose regions compute on a
virtual device that cannot hold the weights, so parameters are copied to it on every
step and their gradients come back (the virtual device computes on the CPU, so its time
is the CPU's plus the copies: it shows the cost of streaming parameters, not a device's
speed). --quick runs a 2-layer, 128-wide GPT-2 at batch 2, sequence 32.

Protocol (BENCHMARKS.md): one process, the same batch, both systems warmed up, timed
steps interleaved eager, compiled, eager, compiled...; each system trains its own copy
of the same weights, and step k of either draws the same dropout masks, so their first
losses agree within float tolerances. Target on the CPU: compiled within 1.1x of eager.
"""

from __future__ import annotations

import argparse
import copy
import gc
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import transformers
from harness import busy_cpu_s, machine, spread, summarize, write_results

import tensortorrent as tt

TARGET_RATIO = 1.1


def gpt2(quick: bool) -> tuple[transformers.GPT2LMHeadModel, torch.Tensor]:
    torch.manual_seed(0)
    layers, width, batch, seq = (2, 128, 2, 32) if quick else (12, 768, 4, 128)
    config = transformers.GPT2Config(
        n_layer=layers, n_embd=width, n_head=width // 64, n_positions=1024, use_cache=False
    )
    return transformers.GPT2LMHeadModel(config), torch.randint(0, config.vocab_size, (batch, seq))


def step_fn(module, ids: torch.Tensor):
    """One training step of `module` with its own Adam; returns it (and records the loss)."""
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-5)
    losses: list[float] = []

    def step() -> None:
        torch.manual_seed(len(losses))  # step k draws the same dropout masks in either system
        optimizer.zero_grad()
        out = module(ids)
        logits = out["logits"] if isinstance(out, dict) else out.logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

    return step, losses


def timed_us(step) -> float:
    gc.disable()
    try:
        start = time.perf_counter_ns()
        step()
        return (time.perf_counter_ns() - start) / 1e3
    finally:
        gc.enable()


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def streamed_plan(model, ids) -> tt.CompiledModule:
    """`model` compiled for training on a virtual device that holds what a step saves for
    backward and half of the weights: the rest are copied to it on every step."""
    config = tt.CompileConfig(allow_training=True)
    on_cpu = tt.compile(model, (ids,), config=config, devices="cpu")
    memory = sum(on_cpu._trainer._runner.saved_bytes) + weight_bytes(model) // 2
    for _ in range(4):
        device = tt.VirtualDevice("acc", memory_bytes=memory, flops=1e15, link_bandwidth=50e9)
        try:
            return tt.compile(model, (ids,), config=config, devices=["acc"], machine=device)
        except tt.PlanningError as error:  # the plan needs more room than the estimate: give it that
            memory = int(error.needed_bytes * 1.05)
    raise RuntimeError(f"no plan for a virtual device of {memory} bytes")


def compare(name: str, compiled, eager, ids, runs: int, warmup: int) -> dict:
    compiled.train()
    eager.train()
    steps = {"eager": step_fn(eager, ids), "compiled": step_fn(compiled, ids)}
    for _ in range(warmup):
        for step, _ in steps.values():
            step()
    samples: dict[str, list[float]] = {system: [] for system in steps}
    busy_before, own_before = busy_cpu_s()
    for _ in range(runs):
        for system, (step, _) in steps.items():
            samples[system].append(timed_us(step))
    busy_after, own_after = busy_cpu_s()
    times = {system: summarize(s) for system, s in samples.items()}
    ratio = times["compiled"]["median_us"] / times["eager"]["median_us"]
    first_losses = {system: losses[0] for system, (_, losses) in steps.items()}
    print(
        f"{name}: eager {spread(times['eager'])} us, compiled {spread(times['compiled'])} us, "
        f"ratio {ratio:.3f}; first losses {first_losses}"
    )
    return {
        "times": times,
        "ratio_compiled_to_eager": ratio,
        "first_loss": first_losses,
        "first_loss_abs_diff": abs(first_losses["compiled"] - first_losses["eager"]),
        "regions": compiled._trainer.region_count,
        "devices": sorted(set(compiled._trainer.region_devices)),
        "other_processes_cpu_s": (busy_after - busy_before) - (own_after - own_before),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small GPT-2, few steps (a smoke run)")
    parser.add_argument("--out", type=Path, help="write the results here only")
    args = parser.parse_args()
    started = datetime.now(timezone.utc)
    runs, warmup = (3, 1) if args.quick else (15, 3)
    model, ids = gpt2(args.quick)
    results = {
        "benchmark": "train_step",
        "quick": args.quick,
        "started": started.isoformat(),
        "machine": machine(),
        "workload": {"model": "gpt2", "layers": model.config.n_layer, "batch_seq": list(ids.shape)},
        "target_ratio_cpu": TARGET_RATIO,
    }
    config = tt.CompileConfig(allow_training=True)
    compiled = tt.compile(copy.deepcopy(model), (ids,), config=config, devices="cpu")
    results["cpu"] = compare("cpu", compiled, copy.deepcopy(model), ids, runs, warmup)
    del compiled
    gc.collect()
    streamed = streamed_plan(copy.deepcopy(model), ids)
    results["streamed_virtual_device"] = compare("streamed", streamed, copy.deepcopy(model), ids, runs, warmup)
    for path in write_results("train_step", results, started, args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
