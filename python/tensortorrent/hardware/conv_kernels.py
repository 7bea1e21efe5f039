"""This host's two CPU kernels for a 2-d convolution whose weight stays the same across
calls: aten's, and oneDNN's on a weight packed once, timed per shape.

aten's conv2d runs on oneDNN too, but reorders the weight into oneDNN's blocked layout on
every call. A weight packed into that layout once (`mkldnn._reorder_convolution_weight`,
for the input size it will see) skips the reorder: on ResNet-50 at batch 1 (224x224, an
AMD EPYC, two threads) packing every convolution ran the model in 0.71x eager's time.
The packed copy costs as much memory again as the weight, and the gain depends on the
CPU and the shape, so each distinct convolution is timed both ways once per process, on
random values of its shape. `torch.backends.mkldnn.enabled = False` leaves every
convolution to aten.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import torch

from .matmul_kernels import DTYPES, onednn_available
from .side_by_side import time_side_by_side

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class PackedTiming:
    aten_s: float
    packed_s: float | None  # None where oneDNN is off or cannot compute it
    packed_bytes: int  # the packed weight's size (0 where it cannot be packed)

    @property
    def faster_packed(self) -> bool:
        return self.packed_s is not None and self.packed_s < self.aten_s


def packed_timing(c: Convolution) -> PackedTiming:
    """Whether and by how much the packed weight computes `c` faster here, and its size."""
    if not onednn_available() or c.dtype not in DTYPES:
        return PackedTiming(0.0, None, 0)
    return _timed(c)


@functools.cache
def _timed(c: Convolution) -> PackedTiming:
    x = torch.randn(c.input, dtype=c.dtype)
    weight = torch.randn(c.weight, dtype=c.dtype)
    bias = torch.randn(c.weight[0], dtype=c.dtype) if c.bias else None
    try:
        packed = c.pack(weight)
        aten_s, packed_s = time_side_by_side(lambda: c.on_aten(x, weight, bias), lambda: c.on_packed(x, packed, bias))
        nbytes = int(torch.ops.mkldnn._nbytes(packed))
    except Exception as error:  # a oneDNN build without this dtype or shape: aten keeps it
        log.debug("oneDNN could not compute %s on a packed weight: %s", c, error)
        return PackedTiming(0.0, None, 0)
    log.debug("%s: aten %.3f ms, packed %.3f ms", c, aten_s * 1e3, packed_s * 1e3)
    return PackedTiming(aten_s, packed_s, nbytes)
