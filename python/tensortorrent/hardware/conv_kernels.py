"""This host's two CPU kernels for a 2-d convolution whose weight stays the same across
calls: aten's, and oneDNN's on a weight packed once, timed per shape.

aten's conv2d runs on oneDNN too, but reorders the weight into oneDNN's blocked layout on
every call. A weight packed into that layout once (`mkldnn._reorder_convolution_weight`,
for the input size it will see) skips the reorder: on S1's ResNet-50 (batch 1, 224x224,
an AMD EPYC, two threads) packing its convolutions took the model from 0.99x eager's
time to 0.67x. Each distinct convolution is timed both ways once per process, on random
values of its shape. `torch.backends.mkldnn.enabled = False` leaves every convolution
to aten.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

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

    def on_packed(self, x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """The convolution of `x` with a weight `pack` made."""
        return torch.ops.mkldnn._convolution_pointwise(
            x, packed, bias, list(self.padding), list(self.stride), list(self.dilation), self.groups, "none", [], ""
        )

    def on_aten(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return torch.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, self.groups)


def packed_timing(c: Convolution) -> PackedTiming:
    """aten's convolution against the packed weight's, here."""
    if not onednn_available() or c.dtype not in DTYPES:
        return PackedTiming(0.0, None)
    return _timed(c)


@functools.cache
def _timed(c: Convolution) -> PackedTiming:
    x = torch.randn(c.input, dtype=c.dtype)
    weight = torch.randn(c.weight, dtype=c.dtype)
    bias = torch.randn(c.weight[0], dtype=c.dtype) if c.bias else None
    return time_packing(
        c, lambda: c.on_aten(x, weight, bias), lambda: c.pack(weight), lambda p: c.on_packed(x, p, bias)
    )
