"""The planner's choice against every placement, valued the same way: lowered, simulated, weighed."""

from __future__ import annotations

import itertools
import random

import pytest
import torch
from torch import nn

import tensortorrent as tt
from tensortorrent import _core
from tensortorrent.planning.placement import PlacementContext

WIDTH = 128


class Branches(nn.Module):
    """Six layers with two parallel branches: a DAG of regions, not only a chain."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(6))

    def forward(self, x):
        first = self.layers[0](x)
        left = self.layers[2](self.layers[1](first))
        right = self.layers[4](self.layers[3](first))
        return self.layers[5](left + right)


def random_machine(rng: random.Random) -> list[tt.VirtualDevice]:
    layer = (WIDTH * WIDTH + WIDTH) * 4
    return [
        tt.VirtualDevice(
            f"d{index}",
            memory_bytes=int(rng.uniform(2.5, 9.0) * layer),
            flops=rng.uniform(0.05e9, 2e9),
            link_bandwidth=rng.uniform(2e6, 50e6),
            link_latency_s=rng.uniform(0, 2e-4),
        )
        for index in range(3)
    ]


def exhaustive_best(compiled) -> float:
    """The lowest simulated value over every device per region (residency by the rule)."""
    placement = compiled._plan.placement
    context = PlacementContext(
        compiled._runner, compiled._regions, compiled.region_costs, placement.machine, placement.objective
    )
    best = float("inf")
    for devices in itertools.product(range(len(placement.machine.devices)), repeat=len(compiled._regions)):
        if any(context.table[r][d] == float("inf") for r, d in enumerate(devices)):
            continue
        resident = tuple(_core.assign_residency(context.problem, list(devices)).resident)
        candidate = context.simulate(devices, resident)
        if not candidate.over_capacity:
            best = min(best, candidate.value)
    return best


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("objective", ["latency", "throughput", "memory"])
def test_the_plan_is_within_one_percent_of_the_exhaustive_optimum(seed, objective):
    torch.manual_seed(seed)
    model = Branches().eval()
    machine = random_machine(random.Random(seed))
    compiled = tt.compile(
        model,
        (torch.randn(4, WIDTH),),
        config=tt.CompileConfig(objective=objective),
        devices=[d.name for d in machine],
        machine=machine,
    )
    assert len(compiled._regions) == 7  # six layers and the join
    chosen = compiled._plan.placement.chosen.value
    optimum = exhaustive_best(compiled)
    assert chosen <= optimum * 1.01, (chosen, optimum)
