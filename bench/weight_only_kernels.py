"""One layer's weight-only product, timed side by side on the CPU (issue 44: torch's own
kernels, or torchao's where faster): TensorTorrent's int8 and int4 ops, torchao's int8 and
int4 weight-only tensors (activations in bfloat16 and in float32), and float32's linear,
at a decode step's rows and at a prefill's. Rounds interleave the systems; each figure is
the median over rounds of a round's mean time per product. torchao is one of the bench
extra's baselines (make bench installs it); without it, its rows are left out and the
results say why.

    python bench/weight_only_kernels.py [--quick] [--out PATH]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import torch
from harness import machine, write_results
from torch import nn

from tensortorrent.compression import compressed_model

GROUP = 128
ROWS = (1, 8, 64)


def torchao_layers(layer: nn.Linear) -> tuple[dict[str, tuple[nn.Module, torch.dtype]], str]:
    """torchao's weight-only layers of `layer` by name, with their activations' dtype, and
    what was found: its version, or why a layer could not be made."""
    try:
        import torchao
        from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig, quantize_
    except ImportError as error:
        return {}, f"torchao not installed ({error})"
    made, notes = {}, [f"torchao {torchao.__version__}"]
    wanted = [
        ("torchao int8, bfloat16", Int8WeightOnlyConfig, {}, torch.bfloat16),
        ("torchao int8, float32", Int8WeightOnlyConfig, {}, torch.float32),
        ("torchao int4, bfloat16", Int4WeightOnlyConfig, {"group_size": GROUP}, torch.bfloat16),
    ]
    for name, config, settings, dtype in wanted:
        quantized = nn.Sequential(copy.deepcopy(layer).to(dtype))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                quantize_(quantized, config(**settings))
                quantized(torch.zeros((1, layer.in_features), dtype=dtype))  # a kernel for the CPU at all?
        except Exception as error:  # torchao refuses a format it has no CPU kernel for in many ways
            notes.append(f"{name}: unavailable ({type(error).__name__}: {str(error).splitlines()[0][:160]})")
            continue
        made[name] = (quantized, dtype)
    return made, "; ".join(notes)


def kernel_times(quick: bool) -> dict:
    """Milliseconds per product of a [features x features] layer at each of ROWS, per system."""
    features, rounds, repeats = (512, 3, 3) if quick else (4096, 7, 10)
    torch.manual_seed(0)
    layer = nn.Linear(features, features, bias=False).eval()
    systems = {
        "float32": (layer, torch.float32),
        "tensortorrent int8": (compressed_model(layer, "int8"), torch.float32),
        "tensortorrent int4": (compressed_model(layer, "int4", GROUP), torch.float32),
    }
    found, torchao = torchao_layers(layer)
    systems.update(found)
    by_rows = {}
    with torch.no_grad():
        for rows in ROWS:
            times: dict[str, list[float]] = {name: [] for name in systems}
            inputs = {name: torch.randn(rows, features).to(dtype) for name, (_, dtype) in systems.items()}
            for name, (module, _) in systems.items():
                module(inputs[name])  # warm: packing, first-call caches
            for _ in range(rounds):
                for name, (module, _) in systems.items():
                    start = time.perf_counter()
                    for _ in range(repeats):
                        module(inputs[name])
                    times[name].append((time.perf_counter() - start) / repeats * 1e3)
            by_rows[str(rows)] = {name: statistics.median(samples) for name, samples in times.items()}
    return {"layer": [features, features], "group_size": GROUP, "torchao": torchao, "ms_per_product": by_rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small layer, few rounds (a smoke test)")
    parser.add_argument("--out", type=Path, default=None, help="write the results here only")
    args = parser.parse_args()
    started = datetime.now(timezone.utc)
    results = {
        "suite": "weight_only_kernels",
        "mode": "quick" if args.quick else "full",
        "utc": started.isoformat(timespec="seconds"),
        "machine": machine(),
        **kernel_times(args.quick),
    }
    out, features = results["layer"]
    print(f"one {out}x{features} layer, ms per product ({results['torchao']}):")
    for rows, figures in results["ms_per_product"].items():
        print(f"  {rows:>3} rows: " + ", ".join(f"{name} {ms:.2f}" for name, ms in figures.items()))
    paths = write_results("weight_only_kernels", results, started, args.out)
    print("results:", ", ".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
