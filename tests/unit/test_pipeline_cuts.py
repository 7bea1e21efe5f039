"""Pipeline cuts: contiguous stages balanced by region time and boundary bytes, only where
every crossing value is a tensor, with skips carried through."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tensortorrent.pipeline.cuts import live_slots, plan_stages

TENSOR = (torch.float32, (1, 4))


def chain(regions: int, skip: bool = False, opaque_cut: int | None = None):
    """Slot 0 the input; region r reads slot r and writes slot r + 1 (with `skip`, the
    last region also reads slot 1); the model returns the last slot. `opaque_cut`: the
    value crossing that cut is not a tensor."""
    kernels = []
    for r in range(regions):
        reads = (r, 1) if skip and r == regions - 1 and r > 1 else (r,)
        kernels.append(SimpleNamespace(in_slots=reads, out_slots=(r + 1,)))
    meta = [TENSOR] * (regions + 1)
    if opaque_cut is not None:
        meta[opaque_cut] = None
    return SimpleNamespace(
        kernels=kernels,
        input_slots=(0,),
        outputs=[(regions, None)],
        slot_meta=meta,
        slot_bytes=[16] * (regions + 1),
        bound_count=0,
    )


def ranges(stages):
    return [(s.first, s.end) for s in stages]


def test_stages_balance_the_slowest():
    runner = chain(4)
    assert ranges(plan_stages(runner, [1.0, 1.0, 1.0, 1.0], 2, 1e12)) == [(0, 2), (2, 4)]
    assert ranges(plan_stages(runner, [3.0, 1.0, 1.0, 1.0], 2, 1e12)) == [(0, 1), (1, 4)]
    assert ranges(plan_stages(runner, [1.0] * 4, 4, 1e12)) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_a_skip_is_carried_through_the_stage_it_skips():
    runner = chain(4, skip=True)
    assert live_slots(runner, 2) == (1, 2)
    first, second = plan_stages(runner, [1.0] * 4, 2, 1e12)
    assert first.outputs == (1, 2) and second.inputs == (1, 2)


def test_cuts_only_where_every_crossing_value_is_a_tensor():
    runner = chain(4, opaque_cut=2)
    assert ranges(plan_stages(runner, [1.0] * 4, 2, 1e12)) in ([(0, 1), (1, 4)], [(0, 3), (3, 4)])
    with pytest.raises(ValueError, match="4 stages need 3 cut"):
        plan_stages(runner, [1.0] * 4, 4, 1e12)


def test_a_slow_link_moves_the_cut_to_fewer_boundary_bytes():
    runner = chain(4, skip=True)  # the cut at 2 sends two values, the others one
    stages = plan_stages(runner, [1.0] * 4, 2, 8.0)  # a value takes 2 s over the link
    # At 2: 2 s computing and 4 s sending on each side; at 1: 1 + 2 s, then 3 + 2 s.
    assert ranges(stages) == [(0, 1), (1, 4)]
    assert stages[0].predicted_s == pytest.approx(3.0) and stages[1].predicted_s == pytest.approx(5.0)
