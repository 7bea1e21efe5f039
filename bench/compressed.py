"""Compressed weights (issue 44): int8 and int4 beside float32, streamed and in RAM, and Accelerate.

For each S2 workload (s2_workloads.py: a deep MLP and a Llama-style decoder, about 4 GiB
of float32 weights each; --quick: small ones, a smoke test), its float32 checkpoint is
written and compressed once per format (tt.quantize_checkpoint). Then each system runs in its own
process (s2_system.py), the page cache of the files it reads dropped before every
timed forward:

- eager with every float32 weight in RAM (beside TensorTorrent's own in-RAM module: the
  faster is float32's compute floor);
- at the protocol's budget, half the float32 weights: TensorTorrent float32 (streamed),
  Accelerate's disk offload, and TensorTorrent int8 and int4 (whose weights fit there:
  nothing streams);
- TensorTorrent int8 and int4 each under half its own weights (three quarters with
  --quick; they stream), and with no budget (all in RAM: the format's compute floor).

The best plain read of each checkpoint's largest file is measured before and after
TensorTorrent's processes (streaming.plain_reads). A format's bound is max(its compute
floor, its weights' bytes beyond the budget / that best read). Targets: int8 at most
0.35x float32's time per forward at the protocol's budget (int4: 0.2x), and each within
1.2x of its own bound where it streams.

    python bench/compressed.py [--quick] [--out PATH] [--dir SCRATCH]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import torch
from harness import machine, write_results
from s2_checkpoints import compute_floor, merged_reads, run_baseline
from s2_workloads import Workload, weight_files, workloads, write_checkpoint
from streaming import plain_reads
from table_format import size

import tensortorrent as tt

READ_BYTES = 1 << 30  # of the largest checkpoint file, per read system and round
FORMATS = {"int8": 0.35, "int4": 0.2}  # each with its target: at most this share of float32's time per forward
TARGET_OVER_BOUND = 1.2


def folder_bytes(directory: str) -> int:
    return sum(os.path.getsize(path) for path in weight_files(directory))


def bench_workload(workload: Workload, directory: str, runs: int, quick: bool) -> dict:
    float_dir = os.path.join(directory, f"checkpoint-{workload.name}-float32")
    write_checkpoint(workload, float_dir)
    float_bytes = folder_bytes(float_dir)
    half_float = float_bytes // 2
    largest = max(weight_files(float_dir), key=os.path.getsize)
    read_bytes = min(READ_BYTES, os.path.getsize(largest) // 4096 * 4096)
    runs_of = [  # (label, system, checkpoint, budget)
        ("eager", "eager", float_dir, 0),  # no budget binds it
        ("float32", "tensortorrent", float_dir, half_float),
        ("accelerate", "accelerate", float_dir, half_float),
    ]
    sizes = {"float32": float_bytes}
    for weight_format in FORMATS:
        folder = os.path.join(directory, f"checkpoint-{workload.name}-{weight_format}")
        # The MLP's folder has no config.json saying which tensors are linear layers: its model does.
        model = None if workload.vocab else workload.meta()
        tt.quantize_checkpoint(float_dir, folder, weight_format, model=model)
        sizes[weight_format] = folder_bytes(folder)
        # Quick sizes' layers are too few for half their compressed bytes to hold a streaming window.
        streamed = sizes[weight_format] * (3 if quick else 2) // 4
        system = f"tensortorrent-{weight_format}"
        runs_of += [
            (weight_format, system, folder, half_float),
            (f"{weight_format}_streamed", system, folder, streamed),
            (f"{weight_format}_in_ram", system, folder, 0),
        ]
    systems, outputs = {}, {}
    before = plain_reads(largest, read_bytes, 2)
    for label, system, checkpoint, budget in runs_of:
        scratch = os.path.join(directory, f"{workload.name}-{label}")
        result = run_baseline(system, workload, checkpoint, budget, runs, scratch, quick)
        if result["status"] == "ok":
            outputs[label] = torch.load(os.path.join(scratch, f"{system}.pt"))
            result["median_s"] = statistics.median(result["forward_s"])
            result["ram_budget_bytes"] = budget or None
        shutil.rmtree(scratch, ignore_errors=True)
        systems[label] = result
    reads = merged_reads(before, plain_reads(largest, read_bytes, 2))
    best = reads["best_plain_gbps"] * 1e9
    floors = {"float32": compute_floor(systems["eager"])[0]}
    bounds = {"float32": max(floors["float32"], (float_bytes - half_float) / best)}
    for label, system, _, budget in runs_of[3:]:
        weight_format = system.removeprefix("tensortorrent-")
        floors[weight_format] = systems[f"{weight_format}_in_ram"]["median_s"]
        if budget:
            bounds[label] = max(floors[weight_format], max(0, sizes[weight_format] - budget) / best)
    for label, result in systems.items():
        if result["status"] == "ok":
            result.update(accuracy(outputs[label], outputs["eager"], bool(workload.vocab)))
            if label in bounds:
                result["bound_s"], result["over_bound"] = bounds[label], result["median_s"] / bounds[label]
    for folder in {checkpoint for _, _, checkpoint, _ in runs_of}:
        shutil.rmtree(folder, ignore_errors=True)
    formats = {}
    for weight_format, target in FORMATS.items():
        over_time = systems[weight_format]["median_s"] / systems["float32"]["median_s"]
        over_bound = systems[f"{weight_format}_streamed"]["over_bound"]
        accelerate = systems["accelerate"]
        formats[weight_format] = {
            "bytes": sizes[weight_format],
            "over_float32_bytes": sizes[weight_format] / float_bytes,
            "over_float32_time": over_time,
            "streamed_over_bound": over_bound,
            "accelerate_over_this": (
                accelerate["median_s"] / systems[weight_format]["median_s"] if accelerate["status"] == "ok" else None
            ),
            "targets": {"over_float32_time": target, "streamed_over_bound": TARGET_OVER_BOUND},
            "met": over_time <= target and over_bound <= TARGET_OVER_BOUND,
        }
    return {
        "workload": vars(workload),
        "float32_bytes": float_bytes,
        "reads": reads,
        "compute_floor_s": floors,
        "systems": systems,
        "formats": formats,
    }


def accuracy(got: torch.Tensor, want: torch.Tensor, logits: bool) -> dict:
    """Against eager float32's output: the largest difference, the cosine, and for logits the top-1 agreement."""
    got, want = got.double(), want.double()
    figures = {
        "max_abs_error_vs_eager": float((got - want).abs().max()),
        "cosine_vs_eager": float(torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0)),
    }
    if logits:
        figures["top1_agreement_vs_eager"] = float((got.argmax(-1) == want.argmax(-1)).double().mean())
    return figures


def describe(result: dict) -> list[str]:
    name, formats = result["workload"]["name"], result["formats"]
    sizes = ", ".join(
        f"{f} {size(figures['bytes'])} ({figures['over_float32_bytes']:.2f}x)" for f, figures in formats.items()
    )
    lines = [
        f"{name}: float32 {size(result['float32_bytes'])}, {sizes}; best plain read "
        f"{result['reads']['best_plain_gbps']:.2f} GB/s"
    ]
    for label, r in result["systems"].items():
        if r["status"] != "ok":
            lines.append(f"  {label:<14} {r['status'].upper()}: {r['error'].strip().splitlines()[-1][:200]}")
            continue
        budget = f"budget {size(r['ram_budget_bytes'])}" if r.get("ram_budget_bytes") else "no budget"
        bound = f", {r['over_bound']:.2f}x its bound" if "over_bound" in r else ""
        top1 = f", top-1 {r['top1_agreement_vs_eager']:.3f}" if "top1_agreement_vs_eager" in r else ""
        lines.append(
            f"  {label:<14} {r['median_s'] * 1e3:8.1f} ms per forward ({budget}{bound}); cosine "
            f"{r['cosine_vs_eager']:.6f}, max |diff| {r['max_abs_error_vs_eager']:.2e}{top1}"
        )
    for weight_format, figures in formats.items():
        targets = figures["targets"]
        lines.append(
            f"  {weight_format} / float32 time at half the float32 weights: {figures['over_float32_time']:.2f}x "
            f"(target <= {targets['over_float32_time']}); {weight_format} streamed: "
            f"{figures['streamed_over_bound']:.2f}x its bound (target <= {targets['streamed_over_bound']})"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small and short (a smoke test, not a measurement)")
    parser.add_argument("--out", type=Path, default=None, help="write the results here only")
    parser.add_argument("--dir", default=None, help="scratch directory for the checkpoints (default: the system's)")
    parser.add_argument("--workloads", default="mlp,llama", help="comma-separated S2 workloads (default: both)")
    args = parser.parse_args()
    started = datetime.now(timezone.utc)
    directory = tempfile.mkdtemp(prefix="tt-compressed-", dir=args.dir)
    try:
        runs = 1 if args.quick else 5
        chosen = [w for w in workloads(args.quick) if w.name in args.workloads.split(",")]
        measured = [bench_workload(w, directory, runs, args.quick) for w in chosen]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    results = {
        "suite": "compressed",
        "mode": "quick" if args.quick else "full",
        "utc": started.isoformat(timespec="seconds"),
        "machine": machine(),
        "workloads": measured,
    }
    for result in measured:
        print("\n".join(describe(result)))
    paths = write_results("compressed", results, started, args.out)
    print("results:", ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
