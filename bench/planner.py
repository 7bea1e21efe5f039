"""The placement search on declared machines (suite S3).

(a) optimality: random small problems (2-8 regions x 2-3 devices) solved by the search
    and exhaustively; the gap of the search's list-schedule latency to the optimum.
(b) planning time: a 1,000-region graph (a chain with skip edges) on 4 devices, and the
    same kind of graph at 10 to 1,000 regions, to show how it scales.
(c) against Accelerate's device_map="auto": accelerators in order take whole regions, in
    order, while they fit, never going back to a device they left; a region that fits on
    none is offloaded: its weights stay in host RAM and are copied to the first
    accelerator, where it computes, on every call, synchronously (no prefetch, no overlap
    with computation). Both plans are scored by the same latency estimate. Then on a
    real model compiled for a declared machine (a fast device with room for a third of
    the model and a slow one with room for all of it): the compiled plan and the
    Accelerate fill, both lowered and simulated.
(d) predicted vs measured: models compiled for the CPU, and the same real model on the
    declared machine, called repeatedly; the simulator's makespan against the median
    measured wall time of a call (target: within 15%).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from harness import machine, write_results
from torch import nn

import tensortorrent as tt
from tensortorrent import _core
from tensortorrent.planning.placement import PlacementContext, region_working_bytes


def random_problem(rng: random.Random, regions: int, devices: int) -> _core.PlacementProblem:
    placement_regions = []
    for index in range(regions):
        deps = [index - 1] if index else []
        if index > 1 and rng.random() < 0.3:
            deps.append(rng.randrange(index - 1))
        placement_regions.append(
            _core.PlacementRegion(
                id=index,
                deps=sorted(set(deps)),
                compute_s=[rng.uniform(0.5, 4.0) / (1 + d) for d in range(devices)],
                param_bytes=rng.randrange(1, 1000) * 1000,
                output_bytes=rng.randrange(1, 100) * 1000,
            )
        )
    capacities = [10**12] + [rng.randrange(1, regions + 1) * 500_000 for _ in range(devices - 1)]
    names = ["cpu"] + [f"acc{d}" for d in range(1, devices)]
    placement_devices = [_core.PlacementDevice(name=n, capacity_bytes=c) for n, c in zip(names, capacities)]
    link = [[0.0 if a == b else 1e-6 for b in range(devices)] for a in range(devices)]
    stream = [0.0] + [2e-6] * (devices - 1)
    return _core.PlacementProblem(placement_regions, placement_devices, link, stream)


def optimality(instances: int) -> dict:
    rng = random.Random(0)
    gaps = []
    by_regions: dict[int, list[float]] = {}
    for _ in range(instances):
        regions = rng.randint(2, 8)
        problem = random_problem(rng, regions, rng.randint(2, 3))
        found, best = _core.search_placement(problem), _core.exhaustive_placement(problem)
        gaps.append(found.best_value / best.best_value - 1.0)
        by_regions.setdefault(regions, []).append(gaps[-1])
    return {
        "instances": instances,
        "median_gap": statistics.median(gaps),
        "worst_gap": max(gaps),
        "within_1_percent": sum(g <= 0.01 for g in gaps) / len(gaps),
        # Per problem size, so that a figure can show whether the gap grows with it.
        "by_regions": [
            {"regions": n, "instances": len(g), "median_gap": statistics.median(g), "worst_gap": max(g)}
            for n, g in sorted(by_regions.items())
        ],
    }


def accelerate_fill(param_bytes: list[int], rooms: list[tuple[int, int]]) -> tuple[list[int], list[bool]]:
    """Accelerate's device_map="auto" over regions of `param_bytes`, in order: `rooms` are
    (device, bytes it may hold) in Accelerate's device order. Returns per region its device
    and whether its weights are resident there; offloaded regions (fitting on no device)
    compute on the first device with their weights copied from host RAM on every call."""
    free = [room for _, room in rooms]
    current = 0  # the device being filled; one that is full is never filled again
    devices, resident = [], []
    for nbytes in param_bytes:
        while current < len(rooms) and free[current] < nbytes:
            current += 1
        if current < len(rooms):
            free[current] -= nbytes
            devices.append(rooms[current][0])
            resident.append(True)
        else:
            devices.append(rooms[0][0])
            resident.append(False)
    return devices, resident


def greedy_fill(problem: _core.PlacementProblem) -> tuple[list[int], list[bool]]:
    """Accelerate's fill of the accelerators (devices 1, 2, ... in order; device 0 is the
    host). The native estimate adds an offloaded region's copy to its compute time."""
    rooms = [(d, problem.devices[d].capacity_bytes) for d in range(1, len(problem.devices))]
    return accelerate_fill([region.param_bytes for region in problem.regions], rooms)


def timed_search(problem: _core.PlacementProblem, runs: int) -> tuple[dict, _core.SearchResult]:
    """Planning time of `problem` ({median, min, max} seconds of `runs` searches) and the search's result."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = _core.search_placement(problem)
        times.append(time.perf_counter() - start)
    return {"median": statistics.median(times), "min": min(times), "max": max(times)}, result


def planning_sweep(sizes: tuple[int, ...], devices: int, runs: int) -> list[dict]:
    """Planning time against graph size (the same kind of graph as `large`), to show how it scales."""
    rows = []
    for regions in sizes:
        planning_s, result = timed_search(random_problem(random.Random(1), regions, devices), runs)
        rows.append(
            {"regions": regions, "devices": devices, "planning_s": planning_s, "evaluations": result.evaluations}
        )
    return rows


def large(regions: int, devices: int, runs: int) -> dict:
    problem = random_problem(random.Random(1), regions, devices)
    planning_s, result = timed_search(problem, runs)
    greedy_devices, greedy_resident = greedy_fill(problem)
    greedy = _core.evaluate_latency(problem, greedy_devices, greedy_resident)
    return {
        "regions": regions,
        "devices": devices,
        "planning_s": planning_s,
        "search_latency_s": result.best_value,
        "greedy_fill_latency_s": greedy,
        "greedy_over_search": greedy / result.best_value,
        "greedy_offloaded": sum(not r for r in greedy_resident),
        "evaluations": result.evaluations,
    }


class Stack(nn.Module):
    """Linear+GELU layers, one region each."""

    def __init__(self, layers: int, width: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def declared_machine(model_bytes: int) -> list[tt.VirtualDevice]:
    """A fast device holding a third of the model and a slow one holding all of it, both
    far slower than this CPU so that the declared speeds, not the host, set the times."""
    return [
        tt.VirtualDevice("fast", memory_bytes=model_bytes // 3, flops=2e9, link_bandwidth=1e9, link_latency_s=1e-4),
        tt.VirtualDevice("slow", memory_bytes=4 * model_bytes, flops=0.2e9, link_bandwidth=1e9, link_latency_s=1e-4),
    ]


def compiled_on_declared_machine(layers: int, width: int, batch: int):
    torch.manual_seed(0)
    model = Stack(layers, width).eval()
    devices = declared_machine(sum(p.numel() * p.element_size() for p in model.parameters()))
    x = torch.randn(batch, width)
    compiled = tt.compile(model, (x,), devices=[d.name for d in devices], machine=devices)
    return model, compiled, x


def greedy_on_declared_machine(compiled) -> dict:
    """(c) on a real model: the compiled plan vs Accelerate's device_map="auto", both simulated."""
    placement = compiled._plan.placement
    context = PlacementContext(
        compiled._runner, compiled._regions, compiled.region_costs, placement.machine, placement.objective
    )
    # Each device holds whole layers up to its memory less room for activations, devices
    # in their declared order (fast, then slow).
    working = max(region_working_bytes(compiled._runner, r.index) for r in compiled._regions)
    rooms = [(d, device.memory_bytes - 2 * working) for d, device in enumerate(placement.machine.devices)]
    devices, resident = accelerate_fill([r.parameter_bytes for r in compiled._regions], rooms)
    # Prefetch 0: an offloaded layer's weights are copied only once the layer before it has
    # computed, and the layer waits for them, as Accelerate's offload hooks do.
    greedy = context._simulate_with(tuple(devices), tuple(resident), prefetch=0)
    chosen = placement.chosen
    return {
        "regions": len(compiled._regions),
        "plan_devices": compiled.region_devices,
        "plan_simulated_s": chosen.measures.latency_s,
        "plan_value": chosen.value,
        "greedy_devices": [placement.machine.devices[d].name for d in devices],
        "greedy_offloaded": sum(not r for r in resident),
        "greedy_simulated_s": greedy.measures.latency_s,
        "greedy_value": greedy.value,
        "greedy_fits": not greedy.over_capacity,
        "greedy_over_plan": greedy.measures.latency_s / chosen.measures.latency_s,
    }


def predicted_vs_measured(compiled, args: tuple, kwargs: dict, calls: int) -> dict:
    """(d) the simulator's makespan against measured call times, same process."""
    walls = []
    for _ in range(calls + 1):
        compiled(*args, **kwargs)
        walls.append(compiled.last_report.wall_us / 1e6)
    measured = statistics.median(walls[1:])  # the first call warms up
    predicted = compiled._plan.placement.chosen.measures.latency_s
    return {
        "devices": sorted(set(compiled.region_devices)),
        "regions": compiled.region_count,
        "predicted_s": predicted,
        "measured_median_s": measured,
        "measured_min_s": min(walls[1:]),
        "measured_max_s": max(walls[1:]),
        "measured_over_predicted": measured / predicted,
    }


def cpu_workloads(quick: bool) -> dict:
    transformers = __import__("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2 if quick else 6, n_embd=256, n_head=4, vocab_size=1024, n_positions=256)
    gpt2 = transformers.GPT2Model(config).eval()
    ids = torch.randint(0, 1024, (4, 64 if quick else 128))
    mlp = Stack(4 if quick else 12, 1024).eval()
    return {
        "mlp_1024x12_batch64": (mlp, (torch.randn(64, 1024),), {}),
        "gpt2_d256_l6_seq128": (gpt2, (ids,), {"use_cache": False}),
    }


def prediction(quick: bool, compiled_declared, x_declared) -> dict:
    calls = 3 if quick else 15
    results = {}
    for name, (model, args, kwargs) in cpu_workloads(quick).items():
        # Through the executor, so that the last report times every region of a call.
        compiled = tt.compile(model, args, config=tt.CompileConfig(prefer_direct_path=False), example_kwargs=kwargs)
        results[f"cpu/{name}"] = predicted_vs_measured(compiled, args, kwargs, calls)
    results["declared/stack"] = predicted_vs_measured(compiled_declared, (x_declared,), {}, calls)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer instances and a 200-region graph")
    parser.add_argument("--out", type=Path, help="write the JSON here only, instead of bench/results/")
    args = parser.parse_args()
    started = datetime.now(timezone.utc)
    results = {
        "benchmark": "planner",
        "mode": "quick" if args.quick else "full",
        "utc": started.isoformat(timespec="seconds"),
        "machine": machine(),
        "optimality": optimality(20 if args.quick else 300),
        "large": large(200 if args.quick else 1000, 4, 3 if args.quick else 5),
        "planning_sweep": planning_sweep(
            (10, 50, 200) if args.quick else (10, 100, 300, 1000), 4, 3 if args.quick else 5
        ),
    }
    _, declared, x = compiled_on_declared_machine(6 if args.quick else 12, 512, 16)
    results["greedy_real_model"] = greedy_on_declared_machine(declared)
    results["prediction"] = prediction(args.quick, declared, x)
    gap, big = results["optimality"], results["large"]
    print(
        f"(a) {gap['instances']} small instances: median gap {gap['median_gap']:.3%}, worst {gap['worst_gap']:.3%}, "
        f"{gap['within_1_percent']:.1%} within 1% of the exhaustive optimum"
    )
    print(
        f"(b) {big['regions']} regions x {big['devices']} devices: planning {big['planning_s']['median']:.3f} s "
        f"(median of runs; target < 1 s), {big['evaluations']} evaluations"
    )
    print(
        f"(c) Accelerate's device_map=auto {big['greedy_fill_latency_s']:.3f} s vs search "
        f"{big['search_latency_s']:.3f} s (estimated latency): greedy/search = {big['greedy_over_search']:.2f}"
    )
    real = results["greedy_real_model"]
    print(
        f"(c) {real['regions']}-layer model on the declared machine, simulated: Accelerate's fill "
        f"{real['greedy_simulated_s'] * 1e3:.1f} ms vs plan {real['plan_simulated_s'] * 1e3:.1f} ms: "
        f"greedy/plan = {real['greedy_over_plan']:.2f}"
    )
    for name, row in results["prediction"].items():
        print(
            f"(d) {name}: predicted {row['predicted_s'] * 1e3:.2f} ms, measured median "
            f"{row['measured_median_s'] * 1e3:.2f} ms: measured/predicted = {row['measured_over_predicted']:.3f}"
        )
    paths = write_results("planner", results, started, args.out)
    print(f"results: {', '.join(str(p) for p in paths)}")


if __name__ == "__main__":
    main()
