"""Suite S2: the I/O engine against the best plain reads, weights streamed under a RAM budget, systems compared.

1. Read bandwidth on one file (1 GiB; --quick: 128 MiB), page cache dropped before every
   read: the I/O engine configured as a streamed load configures it (the read mode
   measured on the file's device), one read of the whole file, against the best
   this harness achieves itself with buffered preads and with O_DIRECT preads, each at
   1, 2, 4 and 8 threads in 16 MiB requests, all into the same file-sized destination,
   interleaved round by round and judged by medians (target: the engine >= 0.9 of the best).
2. A deep MLP (width 4096, fp32; --quick: width 1024) whose weights are twice the RAM
   budget, saved as an artifact and loaded with ram_budget_bytes: time per forward, page
   cache of the weights file dropped before every timed forward, against the bound
   max(T_compute, N / B_best), where T_compute is the faster of eager and TensorTorrent's
   own compiled module with every weight in RAM (each timed interleaved with it), N the
   weights' bytes less the budget (what any plan must read), and B_best part 1's best.
   The last timed call's executor records (measured and predicted start and end of
   every instruction) are kept for the predicted-against-measured figure.
3. The executor's overhead per region (bench/overhead.py's compiled chain), to compare
   with the 3.5 us measured before the data plane.
4. Suite S2 proper (s2_checkpoints.py): a deep MLP of width 4096 and a Llama-style
   decoder, about 4 GiB of fp32 weights each in safetensors checkpoints, under a budget
   of half the weights: TensorTorrent, Accelerate's disk offload, eager over memory-mapped
   safetensors and all-in-RAM eager, each in its own process, page caches dropped before
   every timed forward; time per forward against the bound, peak RSS, and the targets
   (TensorTorrent within 1.15x of the bound, at least 1.5x faster than Accelerate).
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import statistics
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from harness import drop_page_cache, machine, write_results
from overhead import FULL, QUICK, bench_compiled_chain
from s2_checkpoints import bench_checkpoints, describe
from torch import nn

import tensortorrent as tt
from tensortorrent import _core
from tensortorrent.runtime.streamed_weights import choose_read_mode

REQUEST = 16 << 20
THREADS = (1, 2, 4, 8)
TARGET_READ_RATIO = 0.9


def write_file(path: str, size: int) -> None:
    block = os.urandom(16 << 20)
    with open(path, "wb") as handle:
        for offset in range(0, size, len(block)):
            handle.write(block[: min(len(block), size - offset)])
        handle.flush()
        os.fsync(handle.fileno())


def plain_read_gbps(path: str, into: memoryview, threads: int, direct: bool) -> float:
    """GB/s of `threads` threads preading disjoint 16 MiB requests of the file (cold) into
    their place in `into`, a destination of the file's size, as a weights load must."""
    drop_page_cache([path])
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
    fd = os.open(path, flags)
    offsets = list(range(0, len(into), REQUEST))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not offsets:
                    return
                offset = offsets.pop()
            os.preadv(fd, [into[offset : offset + REQUEST]], offset)

    try:
        start = time.perf_counter()
        pool = [threading.Thread(target=worker) for _ in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        return len(into) / (time.perf_counter() - start) / 1e9
    finally:
        os.close(fd)


def engine_read_gbps(path: str, size: int, engine: _core.IoEngine, into: torch.Tensor) -> float:
    drop_page_cache([path])
    start = time.perf_counter()
    engine.read_into(path, 0, into)
    return size / (time.perf_counter() - start) / 1e9


def plain_reads(path: str, size: int, runs: int, engine: _core.IoEngine | None = None) -> dict:
    """The best plain reads of the first `size` bytes of `path` (and the engine's), page
    cache dropped before each, every system once per round, judged by medians."""
    # One destination for every system, page-aligned (as O_DIRECT needs) and faulted in
    # before any timing, so that no system pays for first touching it. In huge pages where
    # the kernel grants them, as TensorTorrent's arenas are: an O_DIRECT read reaches the
    # disk in requests as large as its destination is physically contiguous (up to the
    # queue's limit), so scattered 4 KiB pages alone halved this disk's speed.
    # Private: a shared anonymous mapping is shmem, which takes no huge pages by default.
    destination = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        destination.madvise(mmap.MADV_HUGEPAGE)
    destination.write(bytes(size))
    into = torch.frombuffer(destination, dtype=torch.uint8)
    plain: dict[str, list[float]] = {f"{mode}_{t}": [] for mode in ("buffered", "direct") for t in THREADS}
    ours: list[float] = []
    direct_error = None
    for _ in range(runs):  # interleaved: every system once per round
        if engine is not None:
            ours.append(engine_read_gbps(path, size, engine, into))
        for threads in THREADS:
            plain[f"buffered_{threads}"].append(plain_read_gbps(path, memoryview(destination), threads, direct=False))
            try:
                plain[f"direct_{threads}"].append(plain_read_gbps(path, memoryview(destination), threads, direct=True))
            except OSError as error:  # a file system without O_DIRECT
                plain[f"direct_{threads}"].append(float("nan"))
                direct_error = str(error)
    medians = {name: statistics.median(v) for name, v in plain.items() if v == v}
    best_name = max((n for n, v in medians.items() if v == v), key=lambda n: medians[n])
    return {
        "bytes": size,
        "plain_gbps": {name: summary(v) for name, v in plain.items()},
        "direct_error": direct_error,
        "best_plain": best_name,
        "best_plain_gbps": medians[best_name],
        "engine_samples": ours,
    }


def bench_reads(directory: str, size: int, runs: int) -> dict:
    path = os.path.join(directory, "read.bin")
    write_file(path, size)
    # The engine as a streamed load configures it: the read mode measured on this device.
    chosen = choose_read_mode(path, streamed_bytes=size, depth=None)
    engine = _core.IoEngine(
        threads=chosen.threads, queue_depth=chosen.threads, chunk_bytes=chosen.request_bytes, mode=chosen.mode
    )
    measured = plain_reads(path, size, runs, engine)
    os.remove(path)
    ours = measured.pop("engine_samples")
    engine_median = statistics.median(ours)
    return {
        "file_bytes": size,
        "engine_gbps": summary(ours),
        "engine_configuration": chosen.describe(),
        "engine_direct_fallback": engine.direct_fallback_reason,
        **measured,
        "engine_over_best": engine_median / measured["best_plain_gbps"],
        "target": TARGET_READ_RATIO,
        "meets_target": engine_median / measured["best_plain_gbps"] >= TARGET_READ_RATIO,
    }


def summary(samples: list[float]) -> dict:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "samples": samples}


def bench_stream(directory: str, width: int, layers: int, runs: int, best_gbps: float) -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(layers)]).eval()
    x = torch.randn(8, width)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    budget = weights // 2
    artifact = os.path.join(directory, "mlp")
    tt.compile(model, (x,)).save(artifact)
    streamed = tt.load_compiled(artifact, config=tt.CompileConfig(ram_budget_bytes=budget))
    weights_file = os.path.join(artifact, "weights.safetensors")
    with torch.no_grad():
        expected = model(x)
    in_ram = tt.compile(model, (x,), devices="cpu")  # no budget: the weights stay the model's own, in RAM
    streamed(x)  # warm-up
    in_ram(x)
    eager_model = model
    ours, eager, compiled, reads, overlap, peaks, again = [], [], [], [], [], [], []
    for _ in range(runs):
        drop_page_cache([weights_file])
        start = time.perf_counter()
        got = streamed(x)
        ours.append(time.perf_counter() - start)
        report = streamed.last_report
        reads.append(report.bytes_read)
        overlap.append(report.read_overlapped_us / max(report.read_us, 1e-9))
        peaks.append(streamed.last_peak_bytes["ram"])
        again.append(ours[-1] / streamed._plane.predicted_at(report))
        start = time.perf_counter()
        with torch.no_grad():
            eager_model(x)
        eager.append(time.perf_counter() - start)
        start = time.perf_counter()
        in_ram(x)
        compiled.append(time.perf_counter() - start)
    compute = min(statistics.median(eager), statistics.median(compiled))
    read_bytes = statistics.median(reads)
    must_read = weights - budget
    bound = max(compute, must_read / (best_gbps * 1e9))
    return {
        "width": width,
        "layers": layers,
        "weight_bytes": weights,
        "ram_budget_bytes": budget,
        "bytes_read_per_forward": read_bytes,
        "streamed_s": summary(ours),
        "eager_in_ram_s": summary(eager),
        "compiled_in_ram_s": summary(compiled),
        "must_read_bytes": must_read,
        "compute_floor_s": compute,
        "bound_s": bound,
        "streamed_over_bound": statistics.median(ours) / bound,
        "read_overlap_fraction": statistics.median(overlap),
        "peak_ram_bytes": max(peaks),
        "max_abs_error": float((got - expected).abs().max()),
        "prefetch_distance": streamed._plane.plan.prefetch,
        "predicted_s": streamed._plane.predicted_s(),
        "measured_over_predicted": statistics.median(ours) / streamed._plane.predicted_s(),
        "measured_over_predicted_at_call_speed": statistics.median(again),
        # The last timed call, instruction by instruction, for a predicted-vs-measured figure.
        "instructions": [instruction_record(r) for r in report.records],
    }


def instruction_record(record) -> dict:
    """One executor record as JSON: where and when it ran, and when the simulator said it would."""
    return {
        "label": record.label,
        "kind": record.kind,
        "device": record.device,
        "start_us": record.start_us,
        "end_us": record.end_us,
        "predicted_start_us": record.predicted_start_us,
        "predicted_end_us": record.predicted_end_us,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small and short (a smoke test, not a measurement)")
    parser.add_argument("--out", type=Path, help="write the JSON here only, instead of bench/results/")
    parser.add_argument("--dir", type=str, default=None, help="scratch directory on the disk to measure")
    args = parser.parse_args()
    started = datetime.now(timezone.utc)
    directory = tempfile.mkdtemp(prefix="tt-stream-", dir=args.dir)
    try:
        size, width, layers, runs = (128 << 20, 1024, 16, 3) if args.quick else (1 << 30, 4096, 16, 5)
        reads = bench_reads(directory, size, runs)
        stream = bench_stream(directory, width, layers, runs, reads["best_plain_gbps"])
        overhead = bench_compiled_chain(QUICK if args.quick else FULL)
        checkpoints = bench_checkpoints(directory, 1 if args.quick else 5, args.quick, plain_reads)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    results = {
        "benchmark": "streaming",
        "mode": "quick" if args.quick else "full",
        "utc": started.isoformat(timespec="seconds"),
        "machine": machine(),
        "reads": reads,
        "stream": stream,
        "executor_overhead_per_region_us": overhead["overhead_per_region_us"],
        "executor_overhead_before_us": 3.5,
        "checkpoints": checkpoints,
    }
    print(
        f"reads: engine {reads['engine_gbps']['median']:.2f} GB/s vs best plain {reads['best_plain']} "
        f"{reads['best_plain_gbps']:.2f} GB/s -> {reads['engine_over_best']:.2f} (target >= {TARGET_READ_RATIO})"
    )
    print(
        f"stream: {stream['streamed_s']['median'] * 1e3:.1f} ms per forward vs bound {stream['bound_s'] * 1e3:.1f} ms "
        f"-> {stream['streamed_over_bound']:.2f}x; eager in RAM {stream['eager_in_ram_s']['median'] * 1e3:.1f} ms; "
        f"read {stream['bytes_read_per_forward'] / 2**20:.0f} MiB, overlap {stream['read_overlap_fraction']:.0%}; "
        f"predicted {stream['predicted_s'] * 1e3:.1f} ms (measured/predicted {stream['measured_over_predicted']:.2f}; "
        f"{stream['measured_over_predicted_at_call_speed']:.2f} at each call's own read speed and compute)"
    )
    print(f"executor overhead: {results['executor_overhead_per_region_us']:.2f} us per region (before: 3.5 us)")
    for result in checkpoints:
        print("\n".join(describe(result)))
    paths = write_results("streaming", results, started, args.out)
    print(f"results: {', '.join(str(p) for p in paths)}")


if __name__ == "__main__":
    main()
