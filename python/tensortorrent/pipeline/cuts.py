"""Where a compiled program splits into pipeline stages: contiguous runs of its regions,
balanced by the cost model, cut only where every value crossing is a tensor.

Regions are in topological order, so a stage is a run [first, end) of them. At a cut c,
the values that cross are the live ones: made before c (a user input counts as made at
0) and read by a region at or after c, or returned by the model. They are the outputs
of the stage before the cut and the inputs of the stage after it: a value that skips
over a stage (a skip connection, an attention mask) goes through it, carried as an
extra output. A stage's time is its regions' measured CPU time plus the time its
inputs and outputs take over the link between ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ArgumentValueError


@dataclass(frozen=True)
class Stage:
    first: int  # its first region
    end: int  # one past its last region
    inputs: tuple[int, ...]  # slots it receives, in order
    outputs: tuple[int, ...]  # slots it sends on (the model's outputs from the last stage)
    compute_s: float
    boundary_bytes: int  # bytes it receives and sends
    predicted_s: float  # compute plus the boundary over the link


def live_slots(runner, cut: int) -> tuple[int, ...]:
    """The slots crossing a cut before region `cut` (see the module docstring)."""
    made = set(runner.input_slots)
    for kernel in runner.kernels[:cut]:
        made.update(kernel.out_slots)
    needed = {slot for slot, _ in runner.outputs if slot is not None}
    for kernel in runner.kernels[cut:]:
        needed.update(kernel.in_slots)
    return tuple(sorted(made & needed))


def check_stage_count(num_stages: object) -> None:
    if isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages < 1:
        raise ArgumentValueError(f"export_pipeline: num_stages: expected a positive int, got {num_stages!r}")


def plan_stages(runner, region_seconds: list[float], num_stages: int, link_bytes_per_s: float) -> list[Stage]:
    """The `num_stages` contiguous stages whose slowest predicted stage is fastest.
    Raises ArgumentValueError when the program has fewer places to cut than that asks."""
    regions = len(runner.kernels)
    check_stage_count(num_stages)
    if num_stages > regions:
        raise ArgumentValueError(
            f"export_pipeline: {num_stages} stages asked of a program of {regions} region(s); "
            "a stage holds at least one region"
        )
    live = [live_slots(runner, cut) for cut in range(regions + 1)]
    live[regions] = tuple(slot for slot, _ in runner.outputs if slot is not None)
    cuttable = [cut for cut in range(1, regions) if all(runner.slot_meta[s] is not None for s in live[cut])]
    if len(cuttable) < num_stages - 1:
        raise ArgumentValueError(
            f"export_pipeline: {num_stages} stages need {num_stages - 1} cut(s), and the program has "
            f"{len(cuttable)} place(s) where every value crossing is a tensor"
        )
    bytes_at = [sum(runner.slot_bytes[s] for s in slots) for slots in live]

    def stage_s(first: int, end: int) -> float:
        boundary = bytes_at[first] * (first > 0) + bytes_at[end] * (end < regions)
        return sum(region_seconds[first:end]) + boundary / link_bytes_per_s

    # best[k][end]: (slowest stage, cuts) of the first `end` regions in k stages.
    points = [0, *cuttable, regions]
    best: list[dict[int, tuple[float, tuple[int, ...]]]] = [{0: (0.0, ())}]
    for k in range(1, num_stages + 1):
        row: dict[int, tuple[float, tuple[int, ...]]] = {}
        for end in points[1:]:
            if k == num_stages and end != regions:
                continue
            options = [
                (max(slowest, stage_s(start, end)), cuts + (end,))
                for start, (slowest, cuts) in best[k - 1].items()
                if start < end
            ]
            if options:
                row[end] = min(options)
        best.append(row)
    _, ends = best[num_stages][regions]
    stages, first = [], 0
    for end in ends:
        inputs = live[first] if first > 0 else tuple(runner.input_slots)
        compute = sum(region_seconds[first:end])
        boundary = sum(runner.slot_bytes[s] for s in inputs) * (first > 0) + bytes_at[end] * (end < regions)
        stages.append(Stage(first, end, inputs, live[end], compute, boundary, stage_s(first, end)))
        first = end
    return stages
