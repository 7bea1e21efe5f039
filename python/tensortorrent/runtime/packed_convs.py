"""A CPU region's 2-d convolutions on weights packed once, wherever that ran faster.

Each aten.conv2d of static shape whose weight is one of the model's own tensors (a bound
input of the region, the same tensor on every call of an in-memory plan) becomes a call
of a PackedConvolution where the packed weight computed it faster on this host
(hardware/conv_kernels.py). That module keeps the packed copy from one call to the next
and packs again where the weight it is given is another tensor, or was changed in place
(its version counter moved), so it never computes with a stale copy. The copies cost
memory for the program's life: the caller gives the room they may take, and the lowering
plans their bytes as a resident buffer in RAM (planning/lowering.py), so budgets and
simulated peaks count them. Only the eager graph of an inference region is rewritten:
inductor compiles the graph as captured, and oneDNN's op has no gradient.
"""

from __future__ import annotations

import threading
from collections.abc import Container, Sequence
from dataclasses import dataclass

import torch
from torch import fx, nn

from ..hardware.conv_kernels import Convolution, packed_timing

aten = torch.ops.aten


class PackedConvolution(nn.Module):
    """One convolution computed from a packed copy of its weight, kept across calls."""

    def __init__(self, convolution: Convolution) -> None:
        super().__init__()
        self.convolution = convolution
        self._state: tuple[torch.Tensor, int, torch.Tensor] | None = None  # (weight, its version, packed)
        self._packing = threading.Lock()  # concurrent calls pack once

    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        state = self._state
        if state is None or state[0] is not weight or state[1] != weight._version:
            with self._packing:
                state = self._state
                if state is None or state[0] is not weight or state[1] != weight._version:
                    state = (weight, weight._version, self.convolution.pack(weight.detach()))
                    self._state = state
        return self.convolution.on_packed(x, state[2], bias)


@dataclass(frozen=True)
class Packed:
    """What with_packed_convs rewrote in one region."""

    count: int  # convolutions on packed weights
    nbytes: int  # their packed copies


def with_packed_convs(
    module: fx.GraphModule, weight_inputs: Container[int], room_bytes: int
) -> tuple[fx.GraphModule, Packed]:
    """A copy of the region's `module` with each convolution that ran faster on a packed
    weight rewritten to one, in graph order while their copies fit `room_bytes`;
    `weight_inputs`: the positions of the module's inputs that are the model's own
    tensors. `module` itself where none is rewritten."""
    placeholders = [node for node in module.graph.nodes if node.op == "placeholder"]
    weights = {node for position, node in enumerate(placeholders) if position in weight_inputs}
    chosen, nbytes = [], 0
    for node in module.graph.nodes:
        convolution = _convolution(node, weights)
        if convolution is None:
            continue
        timing = packed_timing(convolution)
        if timing.faster_packed and nbytes + timing.packed_bytes <= room_bytes:
            chosen.append((node, convolution))
            nbytes += timing.packed_bytes
    if not chosen:
        return module, Packed(0, 0)
    graph = fx.Graph()
    copies: dict[fx.Node, fx.Node] = {}
    graph.output(graph.graph_copy(module.graph, copies))
    rewritten = fx.GraphModule(module, graph, class_name=type(module).__name__)
    for index, (node, convolution) in enumerate(chosen):
        name = f"packed_conv_{index}"
        rewritten.add_submodule(name, PackedConvolution(convolution))
        _rewrite(graph, copies[node], name)
    rewritten.recompile()
    return rewritten, Packed(len(chosen), nbytes)


def _convolution(node: fx.Node, weights: set[fx.Node]) -> Convolution | None:
    """The convolution `node` computes where a packed weight could take it: an aten.conv2d
    of static 4-d shapes in one dtype whose weight is one of `weights`."""
    if node.op != "call_function" or node.target != aten.conv2d.default or node.kwargs:
        return None
    x, weight, bias, stride, padding, dilation, groups = _conv_args(node.args)
    if weight not in weights:
        return None
    x_value, weight_value = _static(x), _static(weight)
    bias_value = _static(bias) if bias is not None else None
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


def _static(node) -> torch.Tensor | None:
    value = node.meta.get("val") if isinstance(node, fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
        return None
    return value if all(isinstance(d, int) for d in value.shape) else None


def _rewrite(graph: fx.Graph, node: fx.Node, module_name: str) -> None:
    x, weight, bias = _conv_args(node.args)[:3]
    with graph.inserting_before(node):
        packed = graph.call_module(module_name, (x, weight, bias))
    packed.meta = dict(node.meta)
    node.replace_all_uses_with(packed)
    graph.erase_node(node)
