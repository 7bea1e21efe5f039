"""A two-stage pipeline (torchrun, two processes on loopback, gloo) against the single-process
compiled module, GPT-2 small with 8 microbatches.

The model (random weights from its config) is compiled for one microbatch (batch 1,
sequence 128) and exported in 2 stages; a pipeline step runs 8 microbatches. The
single-process figure is the same compiled module called on the 8 microbatches in turn.
Both run after a warm-up; the pipeline's runner repeats its step (--repeat), and the
first step is dropped as warm-up. Per rank: the step's time, the time computing its
microbatches (the rest is sending, receiving and waiting for the peer), and the cost
model's predicted time per microbatch of the stage against the measured median.
torchrun gives each rank one thread (OMP_NUM_THREADS=1); the single process keeps
torch's default threads: the two use the same cores. --quick: a 2-layer, 128-wide GPT-2.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import transformers
from harness import machine, write_results

import tensortorrent as tt

MICROBATCHES = 8


def gpt2(quick: bool):
    torch.manual_seed(0)
    layers, width = (2, 128) if quick else (12, 768)
    config = transformers.GPT2Config(
        n_layer=layers, n_embd=width, n_head=width // 64, n_positions=1024, use_cache=False
    )
    return transformers.GPT2LMHeadModel(config).eval(), torch.randint(0, config.vocab_size, (1, 32 if quick else 128))


def single_process(compiled, microbatches: list[torch.Tensor], runs: int) -> list[float]:
    for chunk in microbatches:  # warm-up
        compiled(chunk)
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        for chunk in microbatches:
            compiled(chunk)
        seconds.append(time.perf_counter() - start)
    return seconds


def pipeline(directory: Path, runs: int) -> list[dict]:
    report = str(directory.parent / "report-RANK.json")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [str(directory / "torchrun.sh"), "--repeat", str(runs + 1), "--report", report],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the pipeline failed:\n{done.stderr[-3000:]}")
    return [json.loads(Path(report.replace("RANK", str(rank))).read_text()) for rank in range(2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small GPT-2, few steps (a smoke run)")
    parser.add_argument("--out", type=Path, help="write the results here only")
    args = parser.parse_args()
    started = datetime.now(timezone.utc)
    runs = 2 if args.quick else 8
    model, ids = gpt2(args.quick)
    compiled = tt.compile(model, (ids,), devices="cpu")
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch) / "pipeline"
        command = compiled.export_pipeline(directory, 2, n_microbatches=MICROBATCHES)
        plan = json.loads((directory / "pp_plan.json").read_text())
        batch = torch.zeros(plan["inputs"][0]["shape"], dtype=torch.int64)
        alone = single_process(compiled, list(batch.chunk(MICROBATCHES)), runs)
        ranks = pipeline(directory, runs)
    alone_s = statistics.median(alone)
    steps = [r["step_s"][1:] for r in ranks]  # the first step warms up
    step_s = statistics.median(max(per_rank) for per_rank in zip(*steps))
    results = {
        "benchmark": "pipeline",
        "quick": args.quick,
        "started": started.isoformat(),
        "machine": machine(),
        "workload": {"model": "gpt2", "layers": model.config.n_layer, "microbatch": list(ids.shape)},
        "microbatches": MICROBATCHES,
        "command": command,
        "link_bytes_per_s": plan["link_bytes_per_s"],
        "single_process": {"seconds": alone, "median_s": alone_s, "samples_per_s": MICROBATCHES / alone_s},
        "pipeline": {"median_step_s": step_s, "samples_per_s": MICROBATCHES / step_s},
        "throughput_ratio_pipeline_to_single": alone_s / step_s,
        "stages": [],
    }
    for rank, described in zip(ranks, plan["stages"]):
        step = statistics.median(rank["step_s"][1:])
        compute = statistics.median(sum(each) for each in rank["microbatch_compute_s"][1:])
        per_microbatch = statistics.median(s for each in rank["microbatch_compute_s"][1:] for s in each)
        results["stages"].append(
            {
                "regions": described["regions"],
                "boundary_bytes": described["boundary_bytes"],
                "median_step_s": step,
                "median_compute_s": compute,
                "send_recv_and_wait_s": step - compute,
                "predicted_microbatch_s": described["compute_s"],
                "measured_microbatch_s": per_microbatch,
                "measured_over_predicted": per_microbatch / described["compute_s"],
            }
        )
    print(
        f"single process: {alone_s * 1e3:.1f} ms per {MICROBATCHES} microbatches; "
        f"pipeline: {step_s * 1e3:.1f} ms per step; "
        f"throughput ratio {results['throughput_ratio_pipeline_to_single']:.2f}"
    )
    for index, stage in enumerate(results["stages"]):
        print(
            f"stage {index}: step {stage['median_step_s'] * 1e3:.1f} ms, "
            f"computing {stage['median_compute_s'] * 1e3:.1f} ms, "
            f"send/recv/wait {stage['send_recv_and_wait_s'] * 1e3:.1f} ms; per microbatch predicted "
            f"{stage['predicted_microbatch_s'] * 1e3:.2f} ms, measured {stage['measured_microbatch_s'] * 1e3:.2f} ms"
        )
    for path in write_results("pipeline", results, started, args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
