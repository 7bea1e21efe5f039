"""Suite S2 on checkpoints: every system on each workload, each in its own process, against the bound.

For each workload (s2_workloads.py): its checkpoint is written, then each system
(s2_system.py) runs in a fresh process under the same RAM budget: half the weights, then
a quarter and three quarters for the systems a budget binds (TensorTorrent, Accelerate). The
best plain read bandwidth of its largest file is measured (as streaming.py part 1
measures it) just before and just after TensorTorrent's process: this disk's speed
drifts by more than 2x within minutes, so the bound is measured when TensorTorrent reads.
The bound is max(T_compute, N / B_best): T_compute the faster of all-in-RAM eager and
TensorTorrent's own all-in-RAM compiled module (timed interleaved in one process), N the
weights' bytes less the budget (what any system must read per forward, whatever its
plan), B_best that file's best plain read.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import torch
from s2_workloads import weight_files, workloads, write_checkpoint

SYSTEMS = ("eager", "tensortorrent", "accelerate", "mmap")
UNBUDGETED = ("eager", "mmap")  # no RAM budget binds them: run once per workload
BASELINES = ("accelerate", "mmap")  # one that fails or is not installed is recorded so, not fatal
REQUIRED_PACKAGE = {"accelerate": "accelerate"}
# RAM budgets as fractions of the weights: the protocol's half first, then the sweep the
# budget figure draws (docs/figures/s2_budget.png).
FRACTIONS = (0.5, 0.25, 0.75)
QUICK_FRACTIONS = (0.5,)
BENCH = Path(__file__).resolve().parent
READ_BYTES = 1 << 30  # of the largest checkpoint file, per read system and round
READ_ROUNDS = 2  # before TensorTorrent's process, and again after it
ERROR_CHARS = 2000  # of a failed baseline's stderr: its last lines say what failed


def merged_reads(before: dict, after: dict) -> dict:
    """Two rounds of streaming.plain_reads as one: every candidate judged by the median of all its samples."""
    samples = {n: before["plain_gbps"][n]["samples"] + after["plain_gbps"][n]["samples"] for n in before["plain_gbps"]}
    medians = {n: statistics.median(v) for n, v in samples.items() if all(x == x for x in v)}
    best = max(medians, key=medians.get)
    summaries = {
        n: {"median": statistics.median(v), "min": min(v), "max": max(v), "samples": v} for n, v in samples.items()
    }
    return {**before, "plain_gbps": summaries, "best_plain": best, "best_plain_gbps": medians[best]}


def run_system(system: str, workload, checkpoint: str, budget: int, runs: int, scratch: str, quick: bool) -> dict:
    os.makedirs(scratch, exist_ok=True)
    command = [sys.executable, str(BENCH / "s2_system.py"), system, workload.name, checkpoint, str(budget)]
    command += [str(runs), scratch] + (["--quick"] if quick else [])
    done = subprocess.run(command, capture_output=True, text=True, cwd=BENCH)
    if done.returncode != 0:
        raise RuntimeError(f"{system} on {workload.name} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_baseline(system: str, workload, checkpoint: str, budget: int, runs: int, scratch: str, quick: bool) -> dict:
    """run_system's result with "status": "ok"; for a baseline (BASELINES), a failure or a
    missing package is that system's result ("failed" or "missing" with the error), not the
    suite's end. TensorTorrent and eager make the bound: their failure stops the suite."""
    package = REQUIRED_PACKAGE.get(system)
    if package is not None and importlib.util.find_spec(package) is None:
        return {"system": system, "status": "missing", "error": f"{package} is not installed (pip install '.[bench]')"}
    try:
        return {**run_system(system, workload, checkpoint, budget, runs, scratch, quick), "status": "ok"}
    except RuntimeError as error:
        if system not in BASELINES:
            raise
        return {"system": system, "status": "failed", "error": str(error)[-ERROR_CHARS:]}


def bench_workload(workload, directory: str, runs: int, quick: bool, plain_reads) -> list[dict]:
    """The workload at each budget of FRACTIONS (QUICK_FRACTIONS with `quick`): one entry per budget.
    The systems no budget binds run once and appear in every entry."""
    checkpoint = os.path.join(directory, f"checkpoint-{workload.name}")
    write_checkpoint(workload, checkpoint)  # the model it returns is dropped: each system loads its own
    files = weight_files(checkpoint)
    weight_bytes = sum(os.path.getsize(f) for f in files)
    largest = max(files, key=os.path.getsize)
    read_bytes = min(READ_BYTES, os.path.getsize(largest) // 4096 * 4096)
    unbudgeted: dict[str, tuple[dict, torch.Tensor]] = {}
    entries = []
    for fraction in QUICK_FRACTIONS if quick else FRACTIONS:
        budget = int(weight_bytes * fraction)
        systems, outputs = {}, {}
        for system in SYSTEMS:
            if system in unbudgeted:
                systems[system], outputs[system] = unbudgeted[system]
                continue
            scratch = os.path.join(directory, f"{workload.name}-{system}")
            if system == "tensortorrent":
                before = plain_reads(largest, read_bytes, READ_ROUNDS)
            try:
                result = run_baseline(system, workload, checkpoint, budget, runs, scratch, quick)
            finally:
                if system == "tensortorrent":
                    reads = merged_reads(before, plain_reads(largest, read_bytes, READ_ROUNDS))
            if result["status"] == "ok":
                outputs[system] = torch.load(os.path.join(scratch, f"{system}.pt"))
                result["median_s"] = statistics.median(result["forward_s"])
            shutil.rmtree(scratch, ignore_errors=True)
            systems[system] = result
            if system in UNBUDGETED:
                unbudgeted[system] = (result, outputs[system])
        entries.append(summary(workload, weight_bytes, budget, reads, systems, outputs))
    shutil.rmtree(checkpoint, ignore_errors=True)
    return entries


def summary(workload, weight_bytes: int, budget: int, reads: dict, systems: dict, outputs: dict) -> dict:
    """One workload at one budget: each system against the bound and against eager's output."""
    ours = systems["tensortorrent"]
    read_bytes = statistics.median(ours["bytes_read_per_forward"])
    floor, floor_system = compute_floor(systems["eager"])
    must_read = max(0, weight_bytes - budget)
    bound = max(floor, must_read / (reads["best_plain_gbps"] * 1e9))
    at_call_speed = [m / p for m, p in zip(ours["forward_s"], ours["predicted_at_call_speed_s"]) if p]
    systems = {name: dict(result) for name, result in systems.items()}  # the shared ones get this budget's ratio
    for system, result in systems.items():
        if result["status"] == "ok":
            result["over_bound"] = result["median_s"] / bound
            result["max_abs_error_vs_eager"] = float((outputs[system] - outputs["eager"]).abs().max())
    accelerate = systems["accelerate"]
    return {
        "workload": vars(workload),
        "weight_bytes": weight_bytes,
        "ram_budget_bytes": budget,
        "reads": reads,
        "bytes_read_per_forward": read_bytes,
        "must_read_bytes": must_read,
        "compute_floor_s": floor,
        "compute_floor_system": floor_system,
        "bound_s": bound,
        "systems": systems,
        "tensortorrent_over_bound": ours["median_s"] / bound,
        "accelerate_over_tensortorrent": (
            accelerate["median_s"] / ours["median_s"] if accelerate["status"] == "ok" else None
        ),
        "measured_over_predicted": ours["median_s"] / ours["predicted_s"] if ours["predicted_s"] else None,
        "measured_over_predicted_at_call_speed": statistics.median(at_call_speed) if at_call_speed else None,
    }


def compute_floor(eager: dict) -> tuple[float, str]:
    """T_compute: the faster median of eager and TensorTorrent's all-in-RAM module, and which."""
    floors = {"eager": eager["median_s"]}
    if eager.get("compiled_in_ram_forward_s"):
        floors["tensortorrent in RAM"] = statistics.median(eager["compiled_in_ram_forward_s"])
    name = min(floors, key=floors.get)
    return floors[name], name


def bench_checkpoints(directory: str, runs: int, quick: bool, plain_reads) -> list[dict]:
    return [entry for w in workloads(quick) for entry in bench_workload(w, directory, runs, quick, plain_reads)]


def describe(result: dict) -> list[str]:
    lines = [
        f"S2 {result['workload']['name']}: {result['weight_bytes'] / 2**30:.2f} GiB of weights, budget "
        f"{result['ram_budget_bytes'] / 2**30:.2f} GiB; bound {result['bound_s'] * 1e3:.0f} ms "
        f"(compute floor {result['compute_floor_s'] * 1e3:.0f} ms, {result['compute_floor_system']}; "
        f"{result['must_read_bytes'] / 2**20:.0f} MiB to read at {result['reads']['best_plain_gbps']:.2f} GB/s "
        f"best plain, {result['reads']['best_plain']}; TensorTorrent read "
        f"{result['bytes_read_per_forward'] / 2**20:.0f} MiB)"
    ]
    for system, r in result["systems"].items():
        if r["status"] != "ok":
            lines.append(f"  {system:<13} {r['status'].upper()}: {r['error'].strip().splitlines()[-1][:200]}")
            continue
        lines.append(
            f"  {system:<13} {r['median_s'] * 1e3:8.0f} ms per forward ({r['over_bound']:.2f}x bound), "
            f"peak RSS {r['peak_rss_bytes'] / 2**30:.2f} GiB, max |diff| vs eager {r['max_abs_error_vs_eager']:.2e}"
        )
    ours = result["systems"]["tensortorrent"]
    speeds = ", ".join(f"{g:.2f}" for g in ours["read_gbps"] if g)
    ratio = result["accelerate_over_tensortorrent"]
    lines.append(
        f"  tensortorrent {result['tensortorrent_over_bound']:.2f}x the bound; accelerate "
        + (f"{ratio:.2f}x slower than tensortorrent" if ratio is not None else "did not run")
    )
    lines.append(
        f"  tensortorrent: {ours['layout']}; reads at {speeds} GB/s; measured/predicted "
        f"{result['measured_over_predicted']:.2f} (predicted at compile), "
        f"{result['measured_over_predicted_at_call_speed']:.2f} at each call's own read speed and compute"
    )
    return lines
