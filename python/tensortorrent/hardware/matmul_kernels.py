"""This host's two CPU kernels for a matrix product, aten's BLAS and oneDNN, timed per shape.

aten's linear, addmm and mm call the BLAS torch was built with (MKL in the x86 wheels). The
same wheel carries oneDNN, whose kernels are picked by instruction set rather than by CPU
vendor. On an AMD EPYC, oneDNN multiplied GPT-2's float32 linears
2.4-2.9x faster than MKL (128 x 768 x 3072: 465 against 150 GFLOP/s), the weights read in
place, and another 1.3x faster on a weight packed once into its blocked layout
(`packed_timing`; 1.8x for a batch of 8 rows through 2048 x 2048); on an Intel Xeon with
AVX-512, where MKL is fast, the two were within about 7% of each other. Which is faster
depends on the CPU, the shape and the dtype, so each distinct product is timed once per
process, on random values of its shape.

oneDNN is reached through `tensortorrent::linear`, a custom op: inductor's own oneDNN
lowering wants the weights as constants of the graph (torch.compile's freezing), while a
region's weights are inputs of its code; inductor calls a custom op as an external kernel
and its on-disk cache keeps working. The op has no gradient. `torch.backends.mkldnn.enabled
= False` leaves every product to aten.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import torch

from .activations import Activation
from .packed_kernels import PackedTiming, time_packing
from .side_by_side import time_side_by_side

log = logging.getLogger(__name__)

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
    """One matrix product: rows x inner times inner x outer (+ bias)."""

    rows: int
    inner: int
    outer: int
    dtype: torch.dtype
    bias: bool
    transposed: bool  # the weight is stored (inner, outer), as addmm and mm take it

    @property
    def flops(self) -> int:
        return 2 * self.rows * self.inner * self.outer

    def pack(self, stored: torch.Tensor) -> torch.Tensor:
        """The weight as the model stores it, packed into oneDNN's layout for this many rows
        (an opaque tensor of its own; runtime/packed_weights.py)."""
        return torch.ops.mkldnn._reorder_linear_weight(stored.t() if self.transposed else stored, self.rows)

    def on_packed(
        self, x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, activation: Activation | None = None
    ) -> torch.Tensor:
        """The product of `x` with a weight `pack` made (+ bias), then `activation` (oneDNN's
        post-op, applied to each value as it is written)."""
        if activation is None:
            return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [None], "")
        return torch.ops.mkldnn._linear_pointwise(
            x.contiguous(), packed, bias, activation.attr, [], activation.algorithm
        )


@dataclass(frozen=True)
class ActivatedProduct:
    """A product and the activation of its output (seen through a view of `shape`, where
    the model reshapes it first): one oneDNN product with the activation as its post-op."""

    product: Product
    activation: Activation
    shape: tuple[int, ...] | None

    def pack(self, stored: torch.Tensor) -> torch.Tensor:
        return self.product.pack(stored)

    def on_packed(self, x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        y = self.product.on_packed(x, packed, bias, self.activation)
        return y.view(self.shape) if self.shape is not None else y


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled


def faster_on_onednn(p: Product) -> bool:
    """Whether oneDNN computed `p` faster than aten on this host."""
    aten_s, onednn_s = product_seconds(p)
    return onednn_available() and onednn_s is not None and onednn_s < aten_s


def fastest_flops_per_s(p: Product) -> float:
    """The rate of whichever kernel computes `p` faster here (what a region runs)."""
    aten_s, onednn_s = product_seconds(p)
    return _timed(p).flops / (onednn_s if faster_on_onednn(p) else aten_s)


@functools.cache
def product_seconds(p: Product) -> tuple[float, float | None]:
    """Median seconds of (aten, oneDNN) computing the timed part of `p`, side by side;
    oneDNN's is None where it is off or cannot compute `p`."""
    t = _timed(p)
    x = torch.randn(t.rows, t.inner, dtype=t.dtype)
    bias = torch.randn(t.outer, dtype=t.dtype) if t.bias else None
    if t.transposed:
        weight = torch.randn(t.inner, t.outer, dtype=t.dtype)
        stored = weight.t()

        def on_aten():
            return torch.mm(x, weight) if bias is None else torch.addmm(bias, x, weight)
    else:
        stored = weight = torch.randn(t.outer, t.inner, dtype=t.dtype)

        def on_aten():
            return torch.nn.functional.linear(x, weight, bias)

    if not onednn_available():
        return time_side_by_side(on_aten, on_aten)[0], None
    try:
        aten_s, onednn_s = time_side_by_side(on_aten, lambda: LINEAR(x, stored, bias))
    except Exception as error:  # a oneDNN build without this dtype or shape: aten keeps it
        log.debug("oneDNN could not compute %s: %s", p, error)
        return time_side_by_side(on_aten, on_aten)[0], None
    log.debug("%s: aten %.3f ms, oneDNN %.3f ms", p, aten_s * 1e3, onednn_s * 1e3)
    return aten_s, onednn_s


def packed_timing(p: Product | ActivatedProduct) -> PackedTiming:
    """The faster of aten and oneDNN on the weight as stored (then aten's activation),
    against oneDNN on a packed weight (the activation its post-op), here (timed on the
    part of the product that product_seconds times)."""
    if not onednn_available():
        return PackedTiming(0.0, None)
    return _timed_packed(p)


@functools.cache
def _timed_packed(p: Product | ActivatedProduct) -> PackedTiming:
    activation = p.activation if isinstance(p, ActivatedProduct) else None
    p = p.product if isinstance(p, ActivatedProduct) else p
    t = _timed(p)
    x = torch.randn(t.rows, t.inner, dtype=t.dtype)
    bias = torch.randn(t.outer, dtype=t.dtype) if t.bias else None
    stored = (
        torch.randn(t.inner, t.outer, dtype=t.dtype) if t.transposed else torch.randn(t.outer, t.inner, dtype=t.dtype)
    )
    weight = stored.t() if t.transposed else stored  # (outer, inner), as LINEAR takes it
    product = LINEAR if faster_on_onednn(p) else torch.nn.functional.linear
    if activation is None:
        unpacked = lambda: product(x, weight, bias)  # noqa: E731
    else:
        unpacked = lambda: activation.on_aten(product(x, weight, bias))  # noqa: E731
    return time_packing(
        (p, activation), unpacked, lambda: t.pack(stored), lambda packed: t.on_packed(x, packed, bias, activation)
    )


def _timed(p: Product) -> Product:
    """The part of `p` that is timed (TIMED_ROWS, TIMED_WEIGHT_BYTES)."""
    outer = min(p.outer, max(1, TIMED_WEIGHT_BYTES // (p.inner * p.dtype.itemsize)))
    return Product(min(p.rows, TIMED_ROWS), p.inner, outer, p.dtype, p.bias, p.transposed)
