"""A CPU region's convolutions and matrix products on weights packed once, where faster.

Eager's kernels read a weight as the model stores it, and oneDNN's reorder it into their
blocked layout on every call. In a region of an in-memory plan, whose weights are the
model's own tensors on every call, each aten.conv2d and each linear, addmm or mm of
static shape whose weight is one of those tensors becomes a call of a PackedKernel where
the packed weight computed it faster on this host (hardware/conv_kernels.py,
hardware/matmul_kernels.py). The module packs the weight when the region is built, keeps
the copy from one call to the next and packs again where the weight it is given is
another tensor, or was changed in place (its version counter moved), so it never
computes with a stale copy. The copies cost memory for the program's life: the caller
gives the room they may take, and the lowering plans their bytes as a resident buffer in
RAM (planning/lowering.py), so budgets and simulated peaks count them. Only the eager
graph of an inference region is rewritten: inductor compiles the graph as captured, and
oneDNN's ops have no gradient.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import fx, nn

from ..hardware import conv_kernels, matmul_kernels
from ..hardware.conv_kernels import Convolution
from ..hardware.matmul_kernels import Product
from .onednn_linear import operands, product, static_cpu_tensor

aten = torch.ops.aten


class PackedKernel(nn.Module):
    """One convolution or product computed from a packed copy of its weight, kept across calls."""

    def __init__(self, kernel: Convolution | Product, weight: torch.Tensor) -> None:
        super().__init__()
        self.kernel = kernel
        self._state = self._packed(weight)  # (weight, its version, packed copy)
        self._packing = threading.Lock()  # concurrent calls pack once

    @property
    def nbytes(self) -> int:
        return int(torch.ops.mkldnn._nbytes(self._state[2]))

    def _packed(self, weight: torch.Tensor) -> tuple[torch.Tensor, int, torch.Tensor]:
        with torch.no_grad():
            return weight, weight._version, self.kernel.pack(weight.detach())

    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        state = self._state
        if state[0] is not weight or state[1] != weight._version:
            with self._packing:
                state = self._state
                if state[0] is not weight or state[1] != weight._version:
                    state = self._state = self._packed(weight)
        return self.kernel.on_packed(x, state[2], bias)


@dataclass(frozen=True)
class Packed:
    """What with_packed_weights rewrote in one region."""

    count: int  # kernels on packed weights
    nbytes: int  # their packed copies


def pack_room_bytes(ram_budget_bytes: int, weight_bytes: int) -> int:
    """The RAM packed copies may take in an in-memory CPU plan: what half the RAM budget
    leaves beside the weights (the rest is for activations and the copies' own churn)."""
    return max(0, ram_budget_bytes // 2 - weight_bytes)


def with_packed_weights(
    module: fx.GraphModule, weights: Mapping[int, torch.Tensor], room_bytes: int
) -> tuple[fx.GraphModule, Packed]:
    """A copy of the region's aten `module` with each convolution and product that ran
    faster on a packed weight rewritten to one, in graph order while their copies fit
    `room_bytes`; `weights`: the module's inputs that are the model's own tensors, by
    position. `module` itself where nothing is rewritten."""
    if room_bytes <= 0:
        return module, Packed(0, 0)
    placeholders = [node for node in module.graph.nodes if node.op == "placeholder"]
    weight_of = {node: weights[position] for position, node in enumerate(placeholders) if position in weights}
    chosen, nbytes = [], 0
    for node in module.graph.nodes:
        found = _packable(node, weight_of)
        if found is None:
            continue
        kernel, (x, weight, bias) = found
        stored = weight_of[weight]
        if nbytes + stored.numel() * stored.element_size() > room_bytes:
            continue  # a packed copy is never smaller than the weight: no need to pack it to know
        timing = (conv_kernels if isinstance(kernel, Convolution) else matmul_kernels).packed_timing(kernel)
        if not timing.faster_packed:
            continue
        packed = PackedKernel(kernel, stored)
        if nbytes + packed.nbytes <= room_bytes:
            chosen.append((node, packed, (x, weight, bias)))
            nbytes += packed.nbytes
    if not chosen:
        return module, Packed(0, 0)
    graph = fx.Graph()
    copies: dict[fx.Node, fx.Node] = {}
    graph.output(graph.graph_copy(module.graph, copies))
    rewritten = fx.GraphModule(module, graph, class_name=type(module).__name__)
    for index, (node, packed, args) in enumerate(chosen):
        name = f"packed_{index}"
        rewritten.add_submodule(name, packed)
        with graph.inserting_before(copies[node]):
            call = graph.call_module(name, tuple(copies[a] if a is not None else None for a in args))
        call.meta = dict(node.meta)
        copies[node].replace_all_uses_with(call)
        graph.erase_node(copies[node])
        copies[node] = call  # what later kernels read of it
    rewritten.recompile()
    return rewritten, Packed(len(chosen), nbytes)


def _packable(node: fx.Node, weight_of: Mapping[fx.Node, torch.Tensor]):
    """(the kernel, its (input, weight, bias) nodes) where `node` is a convolution or a
    product whose weight is one of the model's tensors; None otherwise."""
    convolution = _convolution(node)
    if convolution is not None:
        x, weight, bias = _conv_args(node.args)[:3]
        return (convolution, (x, weight, bias)) if weight in weight_of else None
    p = product(node)
    if p is None:
        return None
    x, weight, bias, _ = operands(node)
    return (p, (x, weight, bias)) if weight in weight_of else None


def _convolution(node: fx.Node) -> Convolution | None:
    """The convolution `node` computes where a packed weight could take it: an aten.conv2d
    of static 4-d shapes in one dtype."""
    if node.op != "call_function" or node.target != aten.conv2d.default or node.kwargs:
        return None
    x, weight, bias, stride, padding, dilation, groups = _conv_args(node.args)
    x_value, weight_value = static_cpu_tensor(x), static_cpu_tensor(weight)
    bias_value = static_cpu_tensor(bias) if bias is not None else None
    if x_value is None or weight_value is None or (bias is not None and bias_value is None):
        return None
    if x_value.dim() != 4 or weight_value.dim() != 4:
        return None
    if any(v.dtype != x_value.dtype for v in (weight_value, bias_value) if v is not None):
        return None
    return Convolution(
        tuple(x_value.shape),
        tuple(weight_value.shape),
        bias is not None,
        _pair(stride),
        _pair(padding),
        _pair(dilation),
        int(groups),
        x_value.dtype,
    )


def _conv_args(args: Sequence) -> tuple:
    """aten.conv2d's arguments with their defaults: (x, weight, bias, stride, padding, dilation, groups)."""
    defaults = (None, None, None, (1, 1), (0, 0), (1, 1), 1)
    return tuple(args) + defaults[len(args) :]


def _pair(value) -> tuple[int, int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    return (int(values[0]), int(values[-1]))
