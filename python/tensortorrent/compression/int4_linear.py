"""A linear layer whose weight is int4, one scale per group of input features (weight-only).

Each output row's inputs are cut into groups of `group_size`; a group's values are
rounded to -8..7 steps of its largest magnitude / 7 and stored as two per byte (a value
v as the nibble v + 8), in the blocked layout torch's CPU kernel reads
(aten._weight_int4pack_mm_for_cpu): rows in blocks of 64, each block's column k as 32
bytes whose byte b holds row b (low nibble) and row b + 32 (high). So the CPU computes
from the stored bytes directly, in bfloat16 as the int8 layer does. That layout is
torch's, not a documented format: the first CPU call packs a probe both ways, and where
this torch packs otherwise, every call converts the stored values with torch's own
packing (correct, and slower). Elsewhere the values are unpacked where the product
computes. Layers whose output rows are not a multiple of 64, or whose inputs are not a
multiple of the group, stay int8 (compression/model.py).
"""

from __future__ import annotations

import functools
import logging

import torch
from torch import nn

log = logging.getLogger(__name__)

ROWS_PER_BLOCK = 64
INT4_MAX = 7


def fits_int4(rows: int, columns: int, group_size: int) -> bool:
    return rows % ROWS_PER_BLOCK == 0 and columns % group_size == 0


def quantize_int4(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`weight` [out, in] as packed int4 values (uint8 [out, in / 2]) and a scale per
    group ([out, in / group_size], in its dtype)."""
    rows, columns = weight.shape
    with torch.no_grad():
        groups = weight.reshape(rows, columns // group_size, group_size)
        scale = groups.abs().amax(dim=-1).clamp(min=torch.finfo(weight.dtype).tiny) / INT4_MAX
        values = torch.round(groups / scale[..., None]).clamp(-INT4_MAX - 1, INT4_MAX).reshape(rows, columns)
    return pack(values.to(torch.int32) + 8), scale


def pack(nibbles: torch.Tensor) -> torch.Tensor:
    """int32 [rows, columns] of 0..15 in the blocked layout (see the module's docstring)."""
    rows, columns = nibbles.shape
    blocks = nibbles.reshape(rows // ROWS_PER_BLOCK, ROWS_PER_BLOCK, columns)
    half = ROWS_PER_BLOCK // 2
    low, high = blocks[:, :half, :].permute(0, 2, 1), blocks[:, half:, :].permute(0, 2, 1)
    return (low | (high << 4)).to(torch.uint8).contiguous().reshape(rows, columns // 2)


def unpack(packed: torch.Tensor) -> torch.Tensor:
    """The nibbles (int32 [rows, columns], 0..15) of `packed`, on its device."""
    rows, columns = packed.shape[0], packed.shape[1] * 2
    half = ROWS_PER_BLOCK // 2
    blocks = packed.reshape(rows // ROWS_PER_BLOCK, columns, half).to(torch.int32)
    low, high = blocks & 0xF, blocks >> 4
    return torch.cat([low.permute(0, 2, 1), high.permute(0, 2, 1)], dim=1).reshape(rows, columns)


@functools.cache
def torch_packs_alike() -> bool:
    """Whether this torch's CPU packing is ours (checked once, on a probe)."""
    probe = torch.randint(
        0, 16, (2 * ROWS_PER_BLOCK, 256), dtype=torch.int32, generator=torch.Generator().manual_seed(0)
    )
    alike = torch.equal(torch.ops.aten._convert_weight_to_int4pack_for_cpu(probe, 2), pack(probe))
    if not alike:
        log.warning("this torch packs int4 weights otherwise: every int4 product converts its weight first")
    return alike


@torch.library.custom_op("tensortorrent::int4_linear", mutates_args=())
def int4_linear(
    x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, group_size: int, bias: torch.Tensor | None
) -> torch.Tensor:
    """x @ dequantized(weight).T + bias, `weight` packed int4 [out, in / 2]."""
    rows = x.reshape(-1, x.shape[-1])
    out = weight.shape[0]
    if x.device.type == "cpu":
        low = torch.bfloat16
        packed = (
            weight if torch_packs_alike() else torch.ops.aten._convert_weight_to_int4pack_for_cpu(unpack(weight), 2)
        )
        scales = weight_scale.t().to(low)
        scales_and_zeros = torch.stack([scales, torch.zeros_like(scales)], dim=-1).contiguous()
        product = torch.ops.aten._weight_int4pack_mm_for_cpu(
            rows.to(low).contiguous(), packed, group_size, scales_and_zeros
        )
        product = product.to(x.dtype)
    else:
        values = (unpack(weight) - 8).to(x.dtype).reshape(out, -1, group_size) * weight_scale.to(x.dtype)[..., None]
        product = torch.nn.functional.linear(rows, values.reshape(out, -1))
    if bias is not None:
        product = product + bias
    return product.reshape(*x.shape[:-1], out)


@int4_linear.register_fake
def _(x, weight, weight_scale, group_size, bias):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


class Int4Linear(nn.Module):
    """y = x W^T + b with W held as packed int4 values (`weight`, uint8 [out, in / 2]) and a
    float scale per group of `group_size` inputs (`weight_scale`, [out, in / group_size]);
    inference only."""

    def __init__(
        self, weight: torch.Tensor, weight_scale: torch.Tensor, bias: torch.Tensor | None, group_size: int
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.weight_scale = nn.Parameter(weight_scale, requires_grad=False)
        self.bias = nn.Parameter(bias.detach(), requires_grad=False) if bias is not None else None
        self.group_size = group_size
        self.out_features, self.in_features = weight.shape[0], weight.shape[1] * 2

    @classmethod
    def of(cls, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int) -> Int4Linear:
        """The layer of a float weight [out, in]; a meta weight gives meta values and scales."""
        rows, columns = weight.shape
        if weight.device.type == "meta":
            values = torch.empty((rows, columns // 2), dtype=torch.uint8, device="meta")
            scale = torch.empty((rows, columns // group_size), dtype=weight.dtype, device="meta")
            return cls(values, scale, bias, group_size)
        return cls(*quantize_int4(weight.detach(), group_size), bias, group_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return int4_linear(x, self.weight, self.weight_scale, self.group_size, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int4 in groups of {self.group_size}"
