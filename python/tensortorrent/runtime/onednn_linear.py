"""A CPU region's matrix products on oneDNN wherever it multiplies faster than aten's BLAS.

aten's linear, addmm and mm call the BLAS torch was built with (MKL in the x86 wheels). The
same wheel carries oneDNN, whose kernels are picked by instruction set rather than by CPU
vendor. On the AMD EPYC these figures come from, oneDNN multiplied GPT-2's float32 linears
2.4-2.9x faster than MKL (128 x 768 x 3072: 465 against 150 GFLOP/s), the weights read in
place, not repacked. Which is faster depends on the CPU, the shape and the dtype, so each
distinct product is timed both ways once per process, on random values of its shape, and
rewritten only where oneDNN won.

The rewrite goes to `tensortorrent::linear`, a custom op calling oneDNN: inductor's own
oneDNN lowering wants the weights as constants of the graph (torch.compile's freezing),
while a region's weights are inputs of its code. Inductor calls the custom op as an
external kernel, and its on-disk cache keeps working. The op has no gradient: only the
inference program is rewritten (the training program runs aten's kernels). Setting
`torch.backends.mkldnn.enabled = False` before compiling keeps every product on aten.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass

import torch
from torch import fx

from .side_by_side import time_side_by_side

log = logging.getLogger(__name__)
aten = torch.ops.aten

OP_NAME = "tensortorrent::linear"
DTYPES = (torch.float32, torch.bfloat16)
# A product is timed on a bounded part of it: its speed per FLOP hardly changes beyond
# these sizes, and the values timed are allocated beside the RAM budget's weights (a
# 4096 x 128256 vocabulary projection timed in full would take 2 GiB).
TIMED_ROWS = 512
TIMED_WEIGHT_BYTES = 8 << 20

torch.library.define(OP_NAME, "(Tensor input, Tensor weight, Tensor? bias) -> Tensor")


@torch.library.impl(OP_NAME, "cpu")
def _linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """input @ weight.T + bias, weight (out_features, in_features) as nn.Linear keeps it."""
    return torch.ops.mkldnn._linear_pointwise(input.contiguous(), weight, bias, "none", [None], "")


@torch.library.register_fake(OP_NAME)
def _linear_shape(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return input.new_empty((*input.shape[:-1], weight.shape[0]))


LINEAR = torch.ops.tensortorrent.linear.default


@dataclass(frozen=True)
class Product:
    """One matrix product of a region: rows x inner times inner x outer (+ bias)."""

    rows: int
    inner: int
    outer: int
    dtype: torch.dtype
    bias: bool
    transposed: bool  # the weight is stored (inner, outer), as addmm and mm take it


def available() -> bool:
    return torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled


def on_onednn(module: fx.GraphModule) -> tuple[fx.GraphModule, int]:
    """A copy of the region's `module` with every product that ran faster on oneDNN
    rewritten to it, and how many were; `module` itself (and 0) where none was."""
    if not available():
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


def product(node: fx.Node) -> Product | None:
    """The product `node` computes where oneDNN could take it: a CPU aten.linear, addmm
    (bias of one row, no scaling) or mm of static shape in a dtype oneDNN multiplies."""
    if node.op != "call_function" or node.kwargs:
        return None
    if node.target == aten.linear.default and len(node.args) in (2, 3):
        x, weight, bias = (*node.args, None)[:3]
        transposed = False
    elif node.target == aten.addmm.default and len(node.args) == 3:
        bias, x, weight = node.args
        transposed = True
    elif node.target == aten.mm.default and len(node.args) == 2:
        (x, weight), bias = node.args, None
        transposed = True
    else:
        return None
    values = [_static_cpu_tensor(v) for v in (x, weight, bias) if v is not None]
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


def _static_cpu_tensor(node) -> torch.Tensor | None:
    value = node.meta.get("val") if isinstance(node, fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
        return None
    return value if all(isinstance(d, int) for d in value.shape) else None


def _rewrite(graph: fx.Graph, node: fx.Node) -> None:
    if node.target == aten.linear.default:
        x, weight, bias = (*node.args, None)[:3]
    elif node.target == aten.addmm.default:
        bias, x, weight = node.args
    else:
        (x, weight), bias = node.args, None
    with graph.inserting_before(node):
        if node.target != aten.linear.default:  # stored (in, out): oneDNN reads the transposed view in place
            weight = graph.call_function(aten.t.default, (weight,))
        linear = graph.call_function(LINEAR, (x, weight, bias))
    linear.meta = dict(node.meta)
    node.replace_all_uses_with(linear)
    graph.erase_node(node)


@functools.cache
def faster_on_onednn(p: Product) -> bool:
    """Whether oneDNN computed `p` faster than aten, timed side by side."""
    rows = min(p.rows, TIMED_ROWS)
    outer = min(p.outer, max(1, TIMED_WEIGHT_BYTES // (p.inner * p.dtype.itemsize)))
    x = torch.randn(rows, p.inner, dtype=p.dtype)
    bias = torch.randn(outer, dtype=p.dtype) if p.bias else None
    if p.transposed:
        weight = torch.randn(p.inner, outer, dtype=p.dtype)
        stored = weight.t()

        def on_aten():
            return torch.mm(x, weight) if bias is None else torch.addmm(bias, x, weight)
    else:
        stored = weight = torch.randn(outer, p.inner, dtype=p.dtype)

        def on_aten():
            return torch.nn.functional.linear(x, weight, bias)

    try:
        aten_s, onednn_s = time_side_by_side(on_aten, lambda: LINEAR(x, stored, bias))
    except RuntimeError as error:  # a oneDNN build without this dtype or shape: aten keeps it
        log.debug("oneDNN could not compute %s: %s", p, error)
        return False
    log.debug("%s: aten %.3f ms, oneDNN %.3f ms", p, aten_s * 1e3, onednn_s * 1e3)
    return onednn_s < aten_s
