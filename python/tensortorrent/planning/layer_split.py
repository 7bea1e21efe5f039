"""Splitting a layer between the CPU and a device: each computes part of its output features.

A layer whose weights are not resident on its device costs, per call, either the copy of
its weights over the link (the device computes) or its compute on the CPU from host RAM.
Split, the device computes the first `device_rows` output features from those rows of
the weight (copied), the CPU the rest from RAM at the same time, and the device joins the
two halves, in the share of rows that makes both sides take as long: the CPU's measured
time against the link's (see device_rows). At batch 1 on a GPU the CPU's time is about
the link's, and the split beats both; at large batches the CPU's time grows, the
device's share tends to 1, and copying wins. (A virtual device computes on the CPU too,
never faster than it, so there the split shares the CPU's cores at any batch.)

A layer can be split when its region is one `aten.linear` of its own weight (and bias)
followed only by elementwise operations of one tensor (an activation): then the region's
own kernel, given some of the weight's rows, computes those output features.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import fx

from ..partition import Region

aten = torch.ops.aten

# One tensor in, the same shape out, each output feature from the same input feature.
ELEMENTWISE = frozenset(
    {
        aten.relu.default,
        aten.gelu.default,
        aten.silu.default,
        aten.sigmoid.default,
        aten.tanh.default,
        aten.clone.default,
        aten.mul.Tensor,  # by a Python scalar only (checked below)
        aten.div.Tensor,
    }
)
ROW_MULTIPLE = 8  # device rows are rounded to this, for aligned kernels on either side
MIN_GAIN = 0.05  # a split must beat both copying and the CPU by this share of their time


@dataclass(frozen=True)
class SplittableLayer:
    """A region that can be split: its weight [rows, in] and bias, as bound slots."""

    region: int
    weight: int
    bias: int | None
    rows: int


@dataclass(frozen=True)
class LayerSplit:
    """A split layer: the device computes rows [0, device_rows), the CPU the rest."""

    layer: SplittableLayer
    device_rows: int

    @property
    def device_share(self) -> float:
        return self.device_rows / self.layer.rows


def splittable_layers(runner, regions: Sequence[Region]) -> dict[int, SplittableLayer]:
    """Per region index, the layers whose region has the splittable form (see the module doc)."""
    found = {}
    for region in regions:
        layer = _splittable(runner, region)
        if layer is not None:
            found[region.index] = layer
    return found


def _splittable(runner, region: Region) -> SplittableLayer | None:
    nodes = region.nodes
    first = nodes[0]
    if first.target is not aten.linear.default or region.out_nodes != [nodes[-1]]:
        return None
    slots = dict(zip(region.in_nodes, runner.kernels[region.index].in_slots))
    own = set(runner.own_weights.get(region.index, []))
    weight, *rest = first.args[1:]
    bias = rest[0] if rest else None
    if slots.get(weight) not in own or (bias is not None and slots.get(bias) not in own):
        return None
    if not isinstance(first.args[0], fx.Node) or slots.get(first.args[0], -1) < runner.bound_count:
        return None  # the input must be an activation, not a weight
    for previous, node in zip(nodes, nodes[1:]):
        if node.target not in ELEMENTWISE or node.args[0] is not previous:
            return None
        if any(isinstance(a, fx.Node) for a in list(node.args[1:]) + list(node.kwargs.values())):
            return None
    weight_meta = runner.slot_meta[slots[weight]]
    if weight_meta is None or len(weight_meta[1]) != 2:
        return None
    return SplittableLayer(region.index, slots[weight], slots.get(bias), weight_meta[1][0])


def device_rows(layer: SplittableLayer, cpu_s: float, device_s: float, link_s: float, overhead_s: float) -> int:
    """The rows of `layer` the device computes when split, or 0 where copying its weights
    or computing it on the CPU is as fast (within MIN_GAIN).

    Copied, the layer takes M = max(L, D) per call once the copies run ahead (the link's
    L or the device's own compute D); on the CPU, C. Split, the device's share f takes
    f M and the CPU's (1 - f) C plus the split's own transfers o; f M = (1 - f) C + o
    gives f = (C + o) / (C + M), rounded to ROW_MULTIPLE rows."""
    device_side = max(link_s, device_s)
    if device_side <= 0 or cpu_s <= 0:
        return 0
    share = min(1.0, (cpu_s + overhead_s) / (cpu_s + device_side))
    multiple = ROW_MULTIPLE if layer.rows >= 4 * ROW_MULTIPLE else 1
    rows = min(layer.rows, round(share * layer.rows / multiple) * multiple)
    split_s = max(rows / layer.rows * device_side, (1 - rows / layer.rows) * cpu_s + overhead_s)
    if not 0 < rows < layer.rows or split_s > (1 - MIN_GAIN) * min(device_side, cpu_s):
        return 0
    return rows


def join_features(own: torch.Tensor, cpu: torch.Tensor) -> tuple[torch.Tensor]:
    """The join instruction's kernel: the device's output features, then the CPU's."""
    return (torch.cat([own, cpu], dim=-1),)
