"""Region costs of a streamed program, measured: one profiling call streams each region's
weights within the budget, as every later call will, and times each region's compute and
the disk's reads. The simulator then predicts the program from these figures instead of
a roofline."""

from __future__ import annotations

import gc
import logging
from collections.abc import Sequence

import torch

from .. import core
from ..files import drop_page_cache
from ..planning.lowering import LoweredProgram
from ..planning.streaming import MeasuredCosts, call_costs
from ..planning.weights_on_disk import WeightsOnDisk
from .plane_program import PlaneProgram
from .program_runner import ProgramRunner

log = logging.getLogger(__name__)

# Profile only where a call is predicted to take at most this long: the profiling reads
# the streamed weights twice (a warm-up call, then the timed one).
PROFILE_LIMIT_S = 5.0


def profile_streamed(
    runner: ProgramRunner,
    plan: LoweredProgram,
    weights: WeightsOnDisk,
    io: core.IoEngine,
    example: Sequence[object],
    spill_dir: str,
    stall_timeout_s: float,
) -> MeasuredCosts:
    """Runs `plan` on `example` (flat inputs) twice on a data plane of its own and times the
    second call. The plane and its resident weights are gone when this returns, so the
    program that then runs is built within the same budget."""
    bound = runner.bound_values
    plane = PlaneProgram(runner, plan, weights, io, "", spill_dir)
    try:
        for _ in range(2):
            # Read from the device, as a model larger than RAM is: not from the page cache.
            for file in weights.files:
                drop_page_cache(file.path)
            # Without autograd, as the inference calls it predicts run (recording a graph
            # took a Llama's regions twice the CPU time here).
            with torch.no_grad():
                _, report, _ = plane.run(list(example), core.CancelToken(), stall_timeout_s, stall_timeout_s)
    finally:
        runner.rebind(bound)  # drops the views of this plane's resident arena
        del plane
        gc.collect()
    measured = call_costs(report, plan, len(runner.kernels))
    log.info("profiled a streamed call: %.3f ms, reads at %s B/s", report.wall_us / 1e3, measured.read_bytes_per_s)
    return measured
