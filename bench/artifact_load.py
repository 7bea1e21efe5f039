"""How long loading an artifact takes, against reading its files once.

Loading verifies a sha256 of every file and builds the weights from the bytes read, so
its floor is one read of the files. Both are timed warm (files in the page cache) and
cold (the files' cached pages dropped with posix_fadvise before every run), interleaved
A, B, A, B, on a model of about 1 GiB of fp32 weights (--quick: 64 MiB).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from harness import drop_page_cache, machine, write_results
from torch import nn

import tensortorrent as tt


def deep_linear(layers: int, width: int = 4096) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)]).eval()


def artifact_files(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_file())


def read_once(files: list[Path]) -> int:
    """Reads every file fully into memory, as a loader at least must; returns the bytes read."""
    total = 0
    for file in files:
        buffer = bytearray(file.stat().st_size)
        with open(file, "rb", buffering=0) as handle:
            view = memoryview(buffer)
            while total_read := handle.readinto(view):
                view = view[total_read:]
        total += len(buffer)
    return total


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(path: Path, runs: int, cold: bool) -> dict:
    files = artifact_files(path)
    systems = {
        "read_files_once": lambda: read_once(files),
        "load_compiled": lambda: tt.load_compiled(path),
        "load_compiled_unverified": lambda: tt.load_compiled(path, verify_integrity=False),
    }
    for fn in systems.values():  # warm-up: imports, first-touch allocations
        fn()
    samples: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(runs):
        for name, fn in systems.items():
            if cold:
                drop_page_cache(files)
            samples[name].append(timed(fn))
    summary = {
        name: {"median_s": statistics.median(s), "min_s": min(s), "max_s": max(s), "samples_s": s}
        for name, s in samples.items()
    }
    floor = summary["read_files_once"]["median_s"]
    for name in ("load_compiled", "load_compiled_unverified"):
        summary[name]["ratio_to_read_once"] = summary[name]["median_s"] / floor
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 64 MiB model and 3 runs (a smoke test)")
    parser.add_argument("--out", type=Path, help="write the JSON here only, instead of bench/results/")
    parser.add_argument("--dir", type=Path, help="where to write the artifact (default: a temporary directory)")
    args = parser.parse_args()
    layers, runs = (1, 3) if args.quick else (16, 5)
    started = datetime.now(timezone.utc)
    model = deep_linear(layers)
    x = torch.randn(1, 4096)
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        path = Path(scratch) / "artifact"
        compiled = tt.compile(model, example_inputs=(x,))
        save_s = timed(lambda: compiled.save(path))
        loaded = tt.load_compiled(path)
        with torch.no_grad():
            max_error = (loaded(x) - model(x)).abs().max().item()
        size = sum(f.stat().st_size for f in artifact_files(path))
        results = {
            "benchmark": "artifact_load",
            "mode": "quick" if args.quick else "full",
            "utc": started.isoformat(timespec="seconds"),
            "machine": machine(),
            "artifact_bytes": size,
            "save_s": save_s,
            "max_abs_error": max_error,
            "warm": measure(path, runs, cold=False),
            "cold": measure(path, runs, cold=True),
        }
    print(f"artifact of {size / 2**30:.2f} GiB, saved in {save_s:.2f} s; max abs error after loading {max_error:.2g}")
    for condition in ("warm", "cold"):
        row = results[condition]
        print(
            f"  {condition}: read files once {row['read_files_once']['median_s']:.3f} s, "
            f"load_compiled {row['load_compiled']['median_s']:.3f} s "
            f"({row['load_compiled']['ratio_to_read_once']:.2f}x), "
            f"unverified {row['load_compiled_unverified']['median_s']:.3f} s "
            f"({row['load_compiled_unverified']['ratio_to_read_once']:.2f}x); medians of {runs}"
        )
    paths = write_results("artifact_load", results, started, args.out)
    print(f"results: {', '.join(str(p) for p in paths)}")


if __name__ == "__main__":
    main()
