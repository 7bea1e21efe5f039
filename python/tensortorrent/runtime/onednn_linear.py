"""A CPU region's matrix products on oneDNN wherever it multiplies them faster than aten.

Each aten.linear, addmm and mm of static shape in a dtype oneDNN multiplies is rewritten to
`tensortorrent::linear` where that product ran faster on oneDNN on this host
(hardware/matmul_kernels.py: timed once per process per shape). The op has no gradient,
so only the inference program is rewritten; the training program runs aten's kernels.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import fx

from ..hardware.matmul_kernels import DTYPES, LINEAR, Product, faster_on_onednn, onednn_available

aten = torch.ops.aten


def on_onednn(module: fx.GraphModule) -> tuple[fx.GraphModule, int]:
    """A copy of the region's `module` with every product that ran faster on oneDNN
    rewritten to it, and how many were; `module` itself (and 0) where none was."""
    if not onednn_available():
        return module, 0
    faster = [node for node in module.graph.nodes if (p := product(node)) is not None and faster_on_onednn(p)]
    if not faster:
        return module, 0
    graph = fx.Graph()
    copies: dict[fx.Node, fx.Node] = {}
    graph.output(graph.graph_copy(module.graph, copies))
    for node in faster:
        _rewrite(graph, copies[node])
    rewritten = fx.GraphModule(module, graph, class_name=type(module).__name__)
    return rewritten, len(faster)


def onednn_count(module: fx.GraphModule) -> int:
    """The products `module` computes on oneDNN with the weights as stored."""
    return sum(node.op == "call_function" and node.target == LINEAR for node in module.graph.nodes)


def product(node: fx.Node) -> Product | None:
    """The product `node` computes where oneDNN could take it: a CPU aten.linear, addmm
    (bias of one row, no scaling) or mm of static shape in a dtype oneDNN multiplies."""
    found = operands(node)
    if found is None:
        return None
    x, weight, bias, transposed = found
    values = [static_cpu_tensor(v) for v in (x, weight, bias) if v is not None]
    if any(v is None or v.dtype != values[0].dtype for v in values) or values[0].dtype not in DTYPES:
        return None
    x_value, weight_value = values[0], values[1]
    if weight_value.dim() != 2 or x_value.dim() < 2 or (transposed and x_value.dim() != 2):
        return None
    inner, outer = weight_value.shape if transposed else reversed(weight_value.shape)
    if x_value.shape[-1] != inner or (bias is not None and tuple(values[2].shape) != (outer,)):
        return None
    rows = math.prod(x_value.shape[:-1])
    return Product(rows, inner, outer, x_value.dtype, bias is not None, transposed) if rows else None


def operands(node: fx.Node) -> tuple[Any, Any, Any, bool] | None:
    """(input, weight, bias or None, whether the weight is stored (in, out)) of a linear,
    addmm or mm without keyword arguments (addmm's scaling); None for any other node."""
    if node.op != "call_function" or node.kwargs:
        return None
    if node.target == aten.linear.default and len(node.args) in (2, 3):
        x, weight, bias = (*node.args, None)[:3]
        return x, weight, bias, False
    if node.target == aten.addmm.default and len(node.args) == 3:
        bias, x, weight = node.args
        return x, weight, bias, True
    if node.target == aten.mm.default and len(node.args) == 2:
        x, weight = node.args
        return x, weight, None, True
    return None


def static_cpu_tensor(node) -> torch.Tensor | None:
    value = node.meta.get("val") if isinstance(node, fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
        return None
    return value if all(isinstance(d, int) for d in value.shape) else None


def _rewrite(graph: fx.Graph, node: fx.Node) -> None:
    x, weight, bias, transposed = operands(node)
    with graph.inserting_before(node):
        if transposed:  # stored (in, out): oneDNN reads the transposed view in place
            weight = graph.call_function(aten.t.default, (weight,))
        linear = graph.call_function(LINEAR, (x, weight, bias))
    linear.meta = dict(node.meta)
    node.replace_all_uses_with(linear)
    graph.erase_node(node)
