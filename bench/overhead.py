"""What TensorTorrent's runtime costs on top of eager PyTorch, on the CPU.

1. Executor overhead per region:
   (a) the native executor alone on a chain of no-op Python kernels (so the figure
       includes the GIL crossing per instruction), plus the executor's own view from its
       records: the gap between one instruction's end and the next one's start;
   (b) a compiled chain of trivial regions (x + 1.0, one op per region) against the same
       module in eager mode: (compiled - eager) / regions.
2. compiled/eager latency of an MLP and a transformer block on the direct path (default
   config), and again with TT_DIRECT_PATH=0 to show the executor path's round trip.

Protocol (BENCHMARKS.md): one process, same inputs, same thread count; warm-up first,
then timed samples interleaved A, B, A, B. Each sample is a batch of calls sized to take
about 80 ms, reported per call, so microsecond workloads are measurable. The CPU time
other processes used meanwhile is recorded as a noise gauge. See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import torch
from harness import Settings, busy_cpu_s, compare, machine, spread, summarize, write_results
from torch import nn

import tensortorrent as tt
from tensortorrent import _core

TARGET_REGION_US = 20.0
TARGET_RATIO = 1.02
NATIVE_CHAIN = 2000
COMPILED_CHAIN = 200


FULL = Settings(runs=51, sample_ns=80_000_000, warmup_ns=300_000_000)
QUICK = Settings(runs=5, sample_ns=10_000_000, warmup_ns=20_000_000)


@contextmanager
def env_var(name: str, value: str | None) -> Iterator[None]:
    """Sets (or, with None, unsets) an environment variable for the block, then restores it."""
    old = os.environ.pop(name, None)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)
        if old is not None:
            os.environ[name] = old


def compile_and_compare(
    model: nn.Module, x: torch.Tensor, direct_env: str | None, settings: Settings, **config
) -> tuple[tt.CompiledModule, dict]:
    """Compiles under a given TT_DIRECT_PATH (read at compile time) and times eager vs compiled."""
    with env_var("TT_DIRECT_PATH", direct_env):
        start = time.perf_counter()
        compiled = tt.compile(model, example_inputs=(x,), config=tt.CompileConfig(**config))
        compile_s = time.perf_counter() - start

    def eager() -> torch.Tensor:
        with torch.no_grad():
            return model(x)

    timing = compare({"eager": eager, "compiled": lambda: compiled(x)}, settings)
    return compiled, {
        "uses_direct_path": compiled.uses_direct_path,
        "regions": compiled.region_count,
        "compile_s": compile_s,
        "max_abs_error": (compiled(x) - eager()).abs().max().item(),
        "timing": timing,
        "ratio_of_medians": timing["compiled"]["median_us"] / timing["eager"]["median_us"],
    }


def executor_view(report: _core.RunReport) -> dict:
    """Means from the executor's records: idle gap between instructions, and time inside each."""
    records = sorted(report.records, key=lambda r: r.start_us)
    return {
        "gap_us": statistics.fmean(b.start_us - a.end_us for a, b in zip(records, records[1:])),
        "kernel_us": statistics.fmean(r.end_us - r.start_us for r in records),
    }


def bench_native_executor(settings: Settings, caller_runs: bool) -> dict:
    """caller_runs=True is what compiled modules do (a chain stays on the calling thread);
    False makes pool workers run every instruction, so each crosses threads and the GIL."""
    # One worker per usable core, as a compiled module with the default config gets.
    executor = _core.Executor(workers=len(os.sched_getaffinity(0)))
    schedule = _core.Schedule(
        [
            _core.Instruction(
                id=i,
                kind=_core.InstructionKind.Compute,
                region=i,
                device="cpu",
                label=f"r{i}",
                deps=[i - 1] if i else [],
            )
            for i in range(NATIVE_CHAIN)
        ]
    )

    def run_chain() -> _core.RunReport:
        return executor.run(
            schedule, lambda region: None, max_concurrent=0, stall_timeout_s=300.0, cancel=None, caller_runs=caller_runs
        )

    timing = compare({"executor": run_chain}, settings)["executor"]
    per_instruction = summarize([v / NATIVE_CHAIN for v in timing["samples_us"]])
    # The executor's own view comes from separate calls, so reading records stays out of the timing.
    views = [executor_view(run_chain()) for _ in range(settings.runs)]
    return {
        "instructions": NATIVE_CHAIN,
        "caller_runs": caller_runs,
        "workers": run_chain().workers,
        "calls_per_sample": timing["calls_per_sample"],
        "per_instruction": per_instruction,
        "executor_gap_us_median": statistics.median(v["gap_us"] for v in views),
        "executor_kernel_us_median": statistics.median(v["kernel_us"] for v in views),
        "target_us": TARGET_REGION_US,
        "meets_target": per_instruction["median_us"] < TARGET_REGION_US,
    }


class AddChain(nn.Module):
    """x + 1.0, n times; compiled with max_region_nodes=1 every add is its own region."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.n):
            x = x + 1.0
        return x


def bench_compiled_chain(settings: Settings) -> dict:
    torch.manual_seed(0)
    model, x = AddChain(COMPILED_CHAIN).eval(), torch.randn(1)
    compiled, result = compile_and_compare(model, x, None, settings, max_region_nodes=1)
    timing = result["timing"]
    overhead = (timing["compiled"]["median_us"] - timing["eager"]["median_us"]) / COMPILED_CHAIN
    compiled(x)  # a fresh report for the executor's view
    view = executor_view(compiled.last_report)
    return {
        **result,
        "overhead_per_region_us": overhead,
        "executor_gap_us": view["gap_us"],
        "region_kernel_us": view["kernel_us"],
        "target_us": TARGET_REGION_US,
        "meets_target": overhead < TARGET_REGION_US,
    }


def mlp() -> nn.Module:
    """8 x (Linear(2048, 2048), ReLU), the last ReLU included."""
    return nn.Sequential(*[layer for _ in range(8) for layer in (nn.Linear(2048, 2048), nn.ReLU())])


def transformer_block() -> nn.Module:
    return nn.TransformerEncoderLayer(d_model=256, nhead=4, batch_first=True)


WORKLOADS = {"mlp_2048x8_batch8": (mlp, (8, 2048)), "transformer_block_d256_h4": (transformer_block, (8, 32, 256))}


def bench_workload(build: Callable[[], nn.Module], shape: tuple, settings: Settings) -> dict:
    torch.manual_seed(0)  # each workload's weights and input independent of the others' order
    model, x = build().eval(), torch.randn(*shape)
    direct = compile_and_compare(model, x, None, settings)[1]
    direct.update(target_ratio=TARGET_RATIO, meets_target=direct["ratio_of_medians"] <= TARGET_RATIO)
    # Informational: the same plan forced through the executor; no target applies.
    executor = compile_and_compare(model, x, "0", settings)[1]
    return {"input_shape": list(shape), "direct": direct, "executor": executor}


def print_table(results: dict) -> None:
    overhead = results["executor_overhead"]
    chain = overhead["compiled_chain"]
    yes_no = {True: "yes", False: "NO"}
    print(f"\n1. Executor overhead per region (target < {TARGET_REGION_US:g} us)")
    for key, who in (("native", "the caller runs the chain"), ("native_pool", "pool workers run every instruction")):
        native = overhead[key]
        p = native["per_instruction"]
        print(
            f"  (a) native executor, {native['instructions']}-instruction chain, no-op Python kernel, "
            f"{native['workers']} workers, {who}:\n"
            f"      {p['median_us']:.2f} us/instruction (min {p['min_us']:.2f}, max {p['max_us']:.2f}); records: "
            f"gap {native['executor_gap_us_median']:.2f} us, "
            f"in kernel call {native['executor_kernel_us_median']:.2f} us"
            f"   meets target: {yes_no[native['meets_target']]}"
        )
    print(
        f"  (b) compiled {chain['regions']}-region chain of x + 1.0 vs eager, us/call median (min-max):\n"
        f"      eager {spread(chain['timing']['eager'])}, compiled {spread(chain['timing']['compiled'])}\n"
        f"      -> {chain['overhead_per_region_us']:.2f} us/region; records: gap {chain['executor_gap_us']:.2f} us,"
        f" in region {chain['region_kernel_us']:.2f} us; max abs err {chain['max_abs_error']:.3g}"
        f"   meets target: {yes_no[chain['meets_target']]}"
    )
    print(
        f"\n2. compiled/eager latency, us/call median (min-max); target ratio <= {TARGET_RATIO} on the direct path\n"
        f"  {'workload':26} {'path':8} {'regions':>7} {'eager':>28} {'compiled':>28} {'ratio':>6}  target  max err"
    )
    for name, workload in results["latency"].items():
        for r in (workload["direct"], workload["executor"]):
            target = yes_no[r["meets_target"]] if "meets_target" in r else "(info)"
            print(
                f"  {name:26} {'direct' if r['uses_direct_path'] else 'executor':8} {r['regions']:7} "
                f"{spread(r['timing']['eager']):>28} {spread(r['timing']['compiled']):>28} "
                f"{r['ratio_of_medians']:6.3f}  {target:6}  {r['max_abs_error']:.2g}"
            )
    print(
        f"\nother processes kept {results['other_load_cores']:.2f} of {results['machine']['cores_usable']} cores "
        f"busy on average (noise); torch threads {results['torch_threads']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few short samples (a smoke test, not a measurement)")
    parser.add_argument("--out", type=Path, help="write the JSON here only, instead of bench/results/")
    args = parser.parse_args()
    settings = QUICK if args.quick else FULL
    started, start_ns, (busy0, own0) = datetime.now(timezone.utc), time.perf_counter_ns(), busy_cpu_s()
    results = {
        "benchmark": "overhead",
        "mode": "quick" if args.quick else "full",
        "utc": started.isoformat(timespec="seconds"),
        "machine": machine(),
        "torch_threads": torch.get_num_threads(),
        "settings": {
            "runs": settings.runs,
            "sample_ms": settings.sample_ns / 1e6,
            "warmup_ms": settings.warmup_ns / 1e6,
        },
        "executor_overhead": {
            "native": bench_native_executor(settings, caller_runs=True),
            "native_pool": bench_native_executor(settings, caller_runs=False),
            "compiled_chain": bench_compiled_chain(settings),
        },
        "latency": {name: bench_workload(build, shape, settings) for name, (build, shape) in WORKLOADS.items()},
    }
    busy1, own1 = busy_cpu_s()
    results["duration_s"] = (time.perf_counter_ns() - start_ns) / 1e9
    results["other_load_cores"] = max(0.0, (busy1 - busy0) - (own1 - own0)) / results["duration_s"]
    results["torch_threads_at_end"] = torch.get_num_threads()  # equal to torch_threads unless something changed it
    print_table(results)
    paths = write_results("overhead", results, started, args.out)
    print(f"results: {', '.join(str(p) for p in paths)} ({results['duration_s']:.0f} s)")


if __name__ == "__main__":
    main()
