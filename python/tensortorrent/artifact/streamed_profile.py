"""Region costs of a streamed program, measured: one profiling call streams each region's
weights within the budget, as every later call will, and times each region's compute and
the disk's reads. The simulator then predicts the program from these figures instead of
a roofline."""

from __future__ import annotations

import gc
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from .. import _core
from ..files import drop_page_cache
from ..planning.lowering import LoweredProgram
from ..planning.weights_on_disk import WeightsOnDisk
from ..runtime.plane_program import PlaneProgram
from ..runtime.program_runner import ProgramRunner

log = logging.getLogger(__name__)

K = _core.InstructionKind
# Profile only where a call is predicted to take at most this long: the profiling reads
# the streamed weights twice (a warm-up call, then the timed one).
PROFILE_LIMIT_S = 5.0


@dataclass(frozen=True)
class MeasuredCosts:
    region_seconds: tuple[float, ...]  # per region: its compute, as the timed call ran it
    read_bytes_per_s: float | None  # bytes read over the time some read was in flight; None: nothing read


def profile_streamed(
    runner: ProgramRunner,
    plan: LoweredProgram,
    weights: WeightsOnDisk,
    io: _core.IoEngine,
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
            _, report, _ = plane.run(list(example), _core.CancelToken(), stall_timeout_s, stall_timeout_s)
    finally:
        runner.rebind(bound)  # drops the views of this plane's resident arena
        del plane
        gc.collect()
    seconds = [0.0] * len(runner.kernels)
    for record in report.records:
        if record.kind == K.Compute and record.id in plan.region_of:
            seconds[plan.region_of[record.id]] += (record.end_us - record.start_us) / 1e6
    speed = report.bytes_read / (report.read_us / 1e6) if report.read_us > 0 else None
    log.info("profiled a streamed call: %.3f ms, reads at %s B/s", report.wall_us / 1e3, speed)
    return MeasuredCosts(tuple(seconds), speed)
