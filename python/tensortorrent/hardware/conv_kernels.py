"""This host's two CPU kernels for a 2-d convolution whose weight stays the same across
calls: aten's, and oneDNN's on a weight packed once, timed per shape.

aten's conv2d runs on oneDNN too, but reorders the weight into oneDNN's blocked layout on
every call. A weight packed into that layout once (`mkldnn._reorder_convolution_weight`,
for the input size it will see) skips the reorder: on S1's ResNet-50 (batch 1, 224x224,
an AMD EPYC, two threads) packing its convolutions took the model from 0.99x eager's
time to 0.67x. A convolution whose output an eval-mode batch norm alone reads (then maybe
a residual sum and an activation) is one oneDNN kernel on a weight with the norm folded
in, the sum and the activation its post-ops (NormalizedConvolution). Each distinct kernel is timed both ways once per
process, on random values of its shape. `torch.backends.mkldnn.enabled = False` leaves
every convolution to aten.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .activations import Activation
from .matmul_kernels import DTYPES, onednn_available
from .packed_kernels import PackedTiming, time_packing


@dataclass(frozen=True)
class Convolution:
    """One aten.conv2d: its input and weight shapes and its arguments."""

    input: tuple[int, ...]  # (N, C, H, W)
    weight: tuple[int, ...]  # (out channels, in channels / groups, kH, kW)
    bias: bool
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    dtype: torch.dtype

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        """`weight` in oneDNN's layout for this convolution (an opaque tensor of its own)."""
        return torch.ops.mkldnn._reorder_convolution_weight(
            weight, list(self.padding), list(self.stride), list(self.dilation), self.groups, list(self.input)
        )

    def on_packed(
        self, x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, activation: Activation | None = None
    ) -> torch.Tensor:
        """The convolution of `x` with a weight `pack` made, then `activation` (oneDNN's
        post-op, applied to each value as it is written)."""
        attr, algorithm = (activation.attr, activation.algorithm) if activation is not None else ("none", "")
        args = (list(self.padding), list(self.stride), list(self.dilation), self.groups)
        return torch.ops.mkldnn._convolution_pointwise(x, packed, bias, *args, attr, [], algorithm)

    def on_aten(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return torch.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, self.groups)


@dataclass(frozen=True)
class NormalizedConvolution:
    """A convolution, the eval-mode batch norm of its output, where `residual` the sum of
    that and another value of its shape (a residual block's shortcut), and maybe an
    activation of the result: one oneDNN convolution on the weight and bias with the norm
    folded in (y = (conv(x, w) + b - mean) * scale / sqrt(var + eps) + shift is
    conv(x, w * s) + b'), the sum and the activation as its post-ops. Saves the passes
    over the output that eager makes."""

    convolution: Convolution
    eps: float
    activation: Activation | None
    residual: bool = False

    def pack(self, weight, bias, scale, shift, mean, var) -> tuple[torch.Tensor, torch.Tensor]:
        """(the folded weight packed, the folded bias), folded in float32 whatever the
        dtype; `bias`, `scale` and `shift` may be None (no bias, a norm without affine)."""
        dtype = weight.dtype
        factor = torch.rsqrt(var.float() + self.eps)
        if scale is not None:
            factor = factor * scale.float()
        folded_bias = -mean.float() * factor
        if bias is not None:
            folded_bias = folded_bias + bias.float() * factor
        if shift is not None:
            folded_bias = folded_bias + shift.float()
        folded_weight = (weight.float() * factor.reshape(-1, 1, 1, 1)).to(dtype)
        return self.convolution.pack(folded_weight), folded_bias.to(dtype)

    def on_packed(
        self, x: torch.Tensor, packed: tuple[torch.Tensor, torch.Tensor], residual: torch.Tensor | None
    ) -> torch.Tensor:
        """The kernel on `x` with the copy `pack` made (plus `residual`, where it adds one)."""
        weight, folded_bias = packed
        if not self.residual:
            return self.convolution.on_packed(x, weight, folded_bias, self.activation)
        c, activation = self.convolution, self.activation
        args = (list(c.padding), list(c.stride), list(c.dilation), c.groups)
        unary = (activation.attr, activation.algorithm) if activation is not None else (None, None)
        return torch.ops.mkldnn._convolution_pointwise.binary(
            x, residual, weight, folded_bias, *args, "add", 1.0, unary[0], [], unary[1]
        )


def packed_timing(c: Convolution | NormalizedConvolution) -> PackedTiming:
    """aten's convolution (and norm, residual sum and activation) against the packed
    weight's, here."""
    convolution = c.convolution if isinstance(c, NormalizedConvolution) else c
    if not onednn_available() or convolution.dtype not in DTYPES:
        return PackedTiming(0.0, None)
    return _timed(c)


@functools.cache
def _timed(c: Convolution | NormalizedConvolution) -> PackedTiming:
    convolution = c.convolution if isinstance(c, NormalizedConvolution) else c
    dtype, channels = convolution.dtype, convolution.weight[0]
    x = torch.randn(convolution.input, dtype=dtype)
    weight = torch.randn(convolution.weight, dtype=dtype)
    bias = torch.randn(channels, dtype=dtype) if convolution.bias else None
    if isinstance(c, Convolution):
        return time_packing(
            c, lambda: c.on_aten(x, weight, bias), lambda: c.pack(weight), lambda p: c.on_packed(x, p, bias)
        )
    scale, shift, mean = (torch.randn(channels, dtype=dtype) for _ in range(3))
    var = torch.rand(channels, dtype=dtype) + 0.5
    residual = torch.randn_like(convolution.on_aten(x, weight, bias)) if c.residual else None

    def on_aten():
        y = torch.batch_norm(convolution.on_aten(x, weight, bias), scale, shift, mean, var, False, 0.0, c.eps, True)
        y = y + residual if residual is not None else y
        return c.activation.on_aten(y) if c.activation is not None else y

    return time_packing(
        c, on_aten, lambda: c.pack(weight, bias, scale, shift, mean, var), lambda p: c.on_packed(x, p, residual)
    )
