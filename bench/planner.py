"""The placement search on declared machines (suite S3, parts a-c; d needs the planner in compile).

(a) optimality: random small problems (2-8 regions x 2-3 devices) solved by the search
    and exhaustively; the gap of the search's list-schedule latency to the optimum.
(b) planning time: a 1,000-region graph (a chain with skip edges) on 4 devices.
(c) against a greedy sequential fill like Accelerate's device_map="auto": regions in
    order fill the fastest device until its memory is full, then the next; the rest
    computes on the host. Both plans are scored by the same latency estimate.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

from harness import machine, write_results

from tensortorrent import _core


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
    for _ in range(instances):
        problem = random_problem(rng, rng.randint(2, 8), rng.randint(2, 3))
        found, best = _core.search_placement(problem), _core.exhaustive_placement(problem)
        gaps.append(found.best_value / best.best_value - 1.0)
    return {
        "instances": instances,
        "median_gap": statistics.median(gaps),
        "worst_gap": max(gaps),
        "within_1_percent": sum(g <= 0.01 for g in gaps) / len(gaps),
    }


def greedy_fill(problem: _core.PlacementProblem) -> tuple[list[int], list[bool]]:
    """Accelerate-style: fastest device first, regions in order, until its memory is full."""
    order = sorted(range(1, len(problem.devices)), key=lambda d: problem.regions[0].compute_s[d])
    free = {d: problem.devices[d].capacity_bytes for d in order}
    devices = []
    for region in problem.regions:
        target = next((d for d in order if free[d] >= region.param_bytes), 0)
        if target:
            free[target] -= region.param_bytes
        devices.append(target)
    return devices, [True] * len(devices)


def large(regions: int, devices: int, runs: int) -> dict:
    problem = random_problem(random.Random(1), regions, devices)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = _core.search_placement(problem)
        times.append(time.perf_counter() - start)
    greedy_devices, greedy_resident = greedy_fill(problem)
    greedy = _core.evaluate_latency(problem, greedy_devices, greedy_resident)
    return {
        "regions": regions,
        "devices": devices,
        "planning_s": {"median": statistics.median(times), "min": min(times), "max": max(times)},
        "search_latency_s": result.best_value,
        "greedy_fill_latency_s": greedy,
        "greedy_over_search": greedy / result.best_value,
        "evaluations": result.evaluations,
    }


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
    }
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
        f"(c) greedy sequential fill {big['greedy_fill_latency_s']:.3f} s vs search {big['search_latency_s']:.3f} s "
        f"(estimated latency): greedy/search = {big['greedy_over_search']:.2f}"
    )
    paths = write_results("planner", results, started, args.out)
    print(f"results: {', '.join(str(p) for p in paths)}")


if __name__ == "__main__":
    main()
