"""A linear layer whose weight is int8, one scale per output channel (weight-only).

The int8 values and their scales are the layer's tensors: what the weights cache, an
artifact and a checkpoint hold, what streams from disk and what is copied to a device,
at a quarter of float32's bytes. They are turned back into products only where the
product computes, by the `tensortorrent::int8_linear` op: on the CPU torch's
weight-only kernel (aten._weight_int8pack_mm, which computes in bfloat16 there: its
float32 kernel runs about 10x slower on the hosts measured; the scales are applied after
it, in their own dtype), elsewhere the int8 values converted to the input's dtype on the
device, the scales applied to the product's output. Export keeps the op whole, so every
region that computes a layer calls it.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

INT8_MAX = 127  # symmetric: -127..127, so that -x quantizes as the negation of x


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`weight` [out, in] as int8 values and a scale per output row (in its dtype), so
    that values * scale[:, None] is the weight to within half a step of its row."""
    with torch.no_grad():
        scale = weight.abs().amax(dim=1).clamp(min=torch.finfo(weight.dtype).tiny) / INT8_MAX
        values = torch.round(weight / scale[:, None]).clamp(-INT8_MAX, INT8_MAX).to(torch.int8).contiguous()
    return values, scale


def dequantized_int8(values: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The float weight that int8 `values` and a scale per row (the last dimension's rows,
    [out] or [experts, out]) stand for, in the scales' dtype."""
    return values.to(scale.dtype) * scale[..., None]


def frozen_parameter(tensor: torch.Tensor) -> nn.Parameter:
    """`tensor` as a Parameter without gradient; a Parameter as it is, so that layers made
    from one table share it (tied)."""
    return tensor if isinstance(tensor, nn.Parameter) else nn.Parameter(tensor, requires_grad=False)


@torch.library.custom_op("tensortorrent::int8_linear", mutates_args=())
def int8_linear(
    x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """x @ (weight * weight_scale[:, None]).T + bias, with `weight` int8 [out, in]."""
    rows = x.reshape(-1, x.shape[-1])
    if x.device.type == "cpu":
        # The kernel's own scales would be bfloat16, off by up to 0.4% for a whole output
        # channel; applied after it, in the scales' dtype, they cost no measurable time.
        low = torch.bfloat16
        unscaled = torch.ops.aten._weight_int8pack_mm(rows.to(low).contiguous(), weight, unit_scales(weight.shape[0]))
        product = (unscaled.to(weight_scale.dtype) * weight_scale).to(x.dtype)
    else:
        product = torch.nn.functional.linear(rows, weight.to(x.dtype)) * weight_scale.to(x.dtype)
    if bias is not None:
        product = product + bias
    return product.reshape(*x.shape[:-1], weight.shape[0])


@functools.cache
def unit_scales(count: int) -> torch.Tensor:
    """Scales of 1 for the CPU kernel, which applies them in bfloat16 (ours come after it)."""
    return torch.ones(count, dtype=torch.bfloat16)


@int8_linear.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


class Int8Linear(nn.Module):
    """y = x W^T + b with W held as int8 values (`weight`, [out, in]) and a float scale per
    output feature (`weight_scale`); inference only."""

    def __init__(self, weight: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.weight, self.weight_scale = frozen_parameter(weight), frozen_parameter(weight_scale)
        self.bias = nn.Parameter(bias.detach(), requires_grad=False) if bias is not None else None
        self.out_features, self.in_features = weight.shape

    @classmethod
    def of(cls, weight: torch.Tensor, bias: torch.Tensor | None) -> Int8Linear:
        """The layer of a float weight [out, in]; a meta weight gives meta int8 values
        (and scales), to be read from a checkpoint that holds them."""
        if weight.device.type == "meta":
            values = torch.empty(weight.shape, dtype=torch.int8, device="meta")
            return cls(values, torch.empty(weight.shape[0], dtype=weight.dtype, device="meta"), bias)
        return cls(*quantize_int8(weight.detach()), bias)

    def sharing(self, bias: torch.Tensor | None) -> Int8Linear:
        """A layer holding this one's values and scale (the same Parameters: tied), and `bias`."""
        return Int8Linear(self.weight, self.weight_scale, bias)

    def float_weight(self) -> torch.Tensor:
        """The float weight [out, in] that this layer's int8 values and scales stand for."""
        return dequantized_int8(self.weight, self.weight_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return int8_linear(x, self.weight, self.weight_scale, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per output channel"
