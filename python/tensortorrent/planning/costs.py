"""What each region costs: FLOPs and bytes from the graph, seconds measured on the CPU.

FLOPs count the dense math (matrix products, convolutions, attention) exactly from the
shapes export recorded, and every other op as one FLOP per output element. The CPU time
of each region is measured on real tensors by running the program once, region by
region; it is what the planner's CPU costs and explain()'s predictions start from.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from ..capture.program import value_bytes
from ..hardware.matmul_kernels import Product, fastest_flops_per_s
from ..partition import Region

aten = torch.ops.aten


@dataclass(frozen=True)
class RegionCost:
    flops: int
    output_bytes: int  # activations the region hands to others
    cpu_seconds: float | None  # measured; None when not measured


def _shape(value: Any) -> tuple[int, ...]:
    meta = value.meta.get("val") if isinstance(value, fx.Node) else None
    return tuple(int(d) for d in meta.shape) if isinstance(meta, torch.Tensor) else ()


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape) if shape else 1


def node_flops(node: fx.Node) -> int:
    """FLOPs of one operation, from the shapes export recorded."""
    out = _shape(node)
    target = node.target
    if target == aten.linear.default:
        return 2 * _numel(out) * _shape(node.args[1])[-1]
    if target in (aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default, aten.matmul.default):
        first = node.args[1] if target in (aten.addmm.default, aten.baddbmm.default) else node.args[0]
        return 2 * _numel(out) * _shape(first)[-1]
    if target in (aten.convolution.default, aten.conv1d.default, aten.conv2d.default, aten.conv3d.default):
        weight = _shape(node.args[1])
        return 2 * _numel(out) * _numel(weight[1:])
    if target == aten.scaled_dot_product_attention.default:
        query, key = _shape(node.args[0]), _shape(node.args[1])
        return 4 * _numel(query) * key[-2]  # Q @ K^T and P @ V
    value = node.meta.get("val")
    return _numel(out) if isinstance(value, torch.Tensor) else 0


def region_costs(regions: Sequence[Region], cpu_seconds: Sequence[float] | None = None) -> list[RegionCost]:
    """Each region's FLOPs and output bytes, with its measured CPU seconds when given."""
    return [
        RegionCost(
            flops=sum(node_flops(node) for node in region.nodes),
            output_bytes=sum(value_bytes(node) for node in region.out_nodes),
            cpu_seconds=cpu_seconds[region.index] if cpu_seconds is not None else None,
        )
        for region in regions
    ]


def measure_cpu_seconds(runner, flat_inputs: list[Any], repeats: int = 3) -> list[float]:
    """Each region's median time over `repeats` timed runs of the program, region by region
    on the calling thread, after a warm-up run. The median, not the best, because it is
    what predictions of a typical call start from; three runs damp one-off stalls."""
    samples: list[list[float]] = [[] for _ in runner.kernels]
    with torch.no_grad():
        for attempt in range(repeats + 1):
            call = runner.new_call(list(flat_inputs))
            for index in range(len(runner.kernels)):
                start = time.perf_counter()
                call.run_region(index)
                if attempt:  # the first pass warms caches and allocators
                    samples[index].append(time.perf_counter() - start)
    return [statistics.median(times) for times in samples]


_MEMORY_RATE: list[float] = []


def gemm_flops_per_s() -> float:
    """This CPU's fp32 matrix-product rate with the kernel regions run (aten's BLAS or
    oneDNN, whichever was faster: hardware/matmul_kernels.py), measured once per process
    on a 512 x 512 x 512 product: the roofline for regions that cannot be timed on real
    weights."""
    return fastest_flops_per_s(Product(512, 512, 512, torch.float32, bias=False, transposed=False))


def memory_bytes_per_s() -> float:
    """This host's memory bandwidth as torch sees it, measured once per process (copying
    16 MiB, best of three: bytes read plus bytes written). Small, as it counts against a
    RAM budget that compiling from a checkpoint keeps; larger than most caches' share."""
    if not _MEMORY_RATE:
        source = torch.ones(4 << 20)  # 16 MiB of float32
        target = torch.empty_like(source)
        target.copy_(source)  # warm-up: pages faulted in
        best = math.inf
        for _ in range(3):
            start = time.perf_counter()
            target.copy_(source)
            best = min(best, time.perf_counter() - start)
        _MEMORY_RATE.append(2 * source.numel() * source.element_size() / best)
    return _MEMORY_RATE[0]


def roofline_seconds(region: Region, cost: RegionCost) -> float:
    """A region's time without running it: its FLOPs at the measured GEMM rate, or the
    bytes it must touch (its parameters and outputs) at the measured memory bandwidth,
    whichever is longer."""
    return max(cost.flops / gemm_flops_per_s(), (region.parameter_bytes + cost.output_bytes) / memory_bytes_per_s())
