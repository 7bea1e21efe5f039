"""A linear layer whose weight is int4, one scale per group of input features (weight-only).

Each output row's inputs are cut into groups of `group_size`; a group's values are
rounded to -8..7 steps of its largest magnitude / 7 and stored as two per byte (a value
v as the nibble v + 8), in the blocked layout torch's CPU kernel reads
(aten._weight_int4pack_mm_for_cpu): rows in blocks of `rows_per_block`, each block's
column k as rows_per_block / 2 bytes whose byte b holds row b (low nibble) and row
b + rows_per_block / 2 (high). The block is the kernel's, which depends on the CPU
(64 rows where torch runs AVX-512 kernels, 32 on AVX2), and is not a documented format:
it is found once by packing a probe (kernel_rows_per_block). A compile on this machine
stores its layout, so the CPU computes from the stored bytes directly, in bfloat16 as
the int8 layer does; a layer stored with another block (an artifact or checkpoint
written on another CPU: the block is recorded with it) converts its values on every
call (correct, and slower; logged). Elsewhere the values are unpacked where the product
computes. Layers whose output rows are not a multiple of 64, or whose inputs are not a
multiple of the group, stay int8 (compression/model.py).
"""

from __future__ import annotations

import functools
import logging

import torch
from torch import nn

from .int8_linear import frozen_parameter

log = logging.getLogger(__name__)

ROW_BLOCKS = (64, 32)  # the layouts torch's CPU kernels read, by instruction set
INT4_MAX = 7


def fits_int4(rows: int, columns: int, group_size: int) -> bool:
    return rows % max(ROW_BLOCKS) == 0 and columns % group_size == 0


def quantize_int4(weight: torch.Tensor, group_size: int, rows_per_block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`weight` [out, in] as packed int4 values (uint8 [out, in / 2]) and a scale per
    group ([out, in / group_size], in its dtype)."""
    rows, columns = weight.shape
    with torch.no_grad():
        groups = weight.reshape(rows, columns // group_size, group_size)
        scale = groups.abs().amax(dim=-1).clamp(min=torch.finfo(weight.dtype).tiny) / INT4_MAX
        values = torch.round(groups / scale[..., None]).clamp(-INT4_MAX - 1, INT4_MAX).reshape(rows, columns)
    return pack(values.to(torch.int32) + 8, rows_per_block), scale


def pack(nibbles: torch.Tensor, rows_per_block: int) -> torch.Tensor:
    """int32 [rows, columns] of 0..15 in the blocked layout (see the module's docstring)."""
    rows, columns = nibbles.shape
    blocks = nibbles.reshape(rows // rows_per_block, rows_per_block, columns)
    half = rows_per_block // 2
    low, high = blocks[:, :half, :].permute(0, 2, 1), blocks[:, half:, :].permute(0, 2, 1)
    return (low | (high << 4)).to(torch.uint8).contiguous().reshape(rows, columns // 2)


def unpack(packed: torch.Tensor, rows_per_block: int) -> torch.Tensor:
    """The nibbles (int32 [rows, columns], 0..15) of `packed`, on its device."""
    rows, columns = packed.shape[0], packed.shape[1] * 2
    half = rows_per_block // 2
    blocks = packed.reshape(rows // rows_per_block, columns, half).to(torch.int32)
    low, high = blocks & 0xF, blocks >> 4
    return torch.cat([low.permute(0, 2, 1), high.permute(0, 2, 1)], dim=1).reshape(rows, columns)


def dequantized(
    weight: torch.Tensor, weight_scale: torch.Tensor, group_size: int, rows_per_block: int, dtype: torch.dtype
) -> torch.Tensor:
    """The float weight [out, in] in `dtype` that packed `weight` and its scales stand for."""
    rows = weight.shape[0]
    values = (unpack(weight, rows_per_block) - 8).to(dtype).reshape(rows, -1, group_size)
    return (values * weight_scale.to(dtype)[..., None]).reshape(rows, -1)


@functools.cache
def kernel_rows_per_block() -> int | None:
    """The block of this torch's CPU int4 layout on this CPU (checked once, on a probe);
    None where it is none of ROW_BLOCKS."""
    probe = torch.randint(
        0, 16, (2 * max(ROW_BLOCKS), 256), dtype=torch.int32, generator=torch.Generator().manual_seed(0)
    )
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(probe, 2)
    block = next((block for block in ROW_BLOCKS if torch.equal(packed, pack(probe, block))), None)
    if block is None:
        log.warning("this torch packs int4 weights in a layout of its own: every int4 product converts its weight")
    return block


def stored_rows_per_block() -> int:
    """The block a compile on this machine stores int4 values in: its kernel's."""
    return kernel_rows_per_block() or max(ROW_BLOCKS)


@torch.library.custom_op("tensortorrent::int4_linear", mutates_args=())
def int4_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    group_size: int,
    rows_per_block: int,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """x @ dequantized(weight).T + bias, `weight` packed int4 [out, in / 2] in blocks of `rows_per_block` rows."""
    rows = x.reshape(-1, x.shape[-1])
    out = weight.shape[0]
    if x.device.type == "cpu":
        product = _cpu_product(rows, weight, weight_scale, group_size, rows_per_block).to(x.dtype)
    else:
        product = torch.nn.functional.linear(
            rows, dequantized(weight, weight_scale, group_size, rows_per_block, x.dtype)
        )
    if bias is not None:
        product = product + bias
    return product.reshape(*x.shape[:-1], out)


def _cpu_product(rows, weight, weight_scale, group_size: int, rows_per_block: int) -> torch.Tensor:
    low = torch.bfloat16
    if rows_per_block != kernel_rows_per_block():
        _warn_converting(rows_per_block)
        weight = torch.ops.aten._convert_weight_to_int4pack_for_cpu(unpack(weight, rows_per_block), 2)
    # The kernel takes a scale and a zero per group and output: [groups, out, 2].
    scales_and_zeros = torch.zeros((weight_scale.shape[1], weight_scale.shape[0], 2), dtype=low)
    scales_and_zeros[..., 0].copy_(weight_scale.t())
    return torch.ops.aten._weight_int4pack_mm_for_cpu(rows.to(low).contiguous(), weight, group_size, scales_and_zeros)


@functools.cache
def _warn_converting(rows_per_block: int) -> None:
    log.warning(
        "int4 weights stored in blocks of %d rows (written on another CPU); this CPU's kernel reads blocks of %s: "
        "every int4 product converts its weight (recompile or quantize here to compute from the stored bytes)",
        rows_per_block,
        kernel_rows_per_block(),
    )


@int4_linear.register_fake
def _(x, weight, weight_scale, group_size, rows_per_block, bias):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


class Int4Linear(nn.Module):
    """y = x W^T + b with W held as packed int4 values (`weight`, uint8 [out, in / 2], in
    blocks of `rows_per_block` rows) and a float scale per group of `group_size` inputs
    (`weight_scale`, [out, in / group_size]); inference only."""

    def __init__(
        self,
        weight: torch.Tensor,
        weight_scale: torch.Tensor,
        bias: torch.Tensor | None,
        group_size: int,
        rows_per_block: int,
    ) -> None:
        super().__init__()
        self.weight, self.weight_scale = frozen_parameter(weight), frozen_parameter(weight_scale)
        self.bias = nn.Parameter(bias.detach(), requires_grad=False) if bias is not None else None
        self.group_size, self.rows_per_block = group_size, rows_per_block
        self.out_features, self.in_features = weight.shape[0], weight.shape[1] * 2

    @classmethod
    def of(
        cls, weight: torch.Tensor, bias: torch.Tensor | None, group_size: int, rows_per_block: int | None = None
    ) -> Int4Linear:
        """The layer of a float weight [out, in], its values in blocks of `rows_per_block`
        rows (None: this machine's); a meta weight gives meta values and scales."""
        block = rows_per_block or stored_rows_per_block()
        rows, columns = weight.shape
        if weight.device.type == "meta":
            values = torch.empty((rows, columns // 2), dtype=torch.uint8, device="meta")
            scale = torch.empty((rows, columns // group_size), dtype=weight.dtype, device="meta")
            return cls(values, scale, bias, group_size, block)
        return cls(*quantize_int4(weight.detach(), group_size, block), bias, group_size, block)

    def sharing(self, bias: torch.Tensor | None) -> Int4Linear:
        """A layer holding this one's values and scale (the same Parameters: tied), and `bias`."""
        return Int4Linear(self.weight, self.weight_scale, bias, self.group_size, self.rows_per_block)

    def float_weight(self) -> torch.Tensor:
        """The float weight [out, in] that this layer's packed values and scales stand for."""
        dtype = self.weight_scale.dtype
        return dequantized(self.weight, self.weight_scale, self.group_size, self.rows_per_block, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return int4_linear(x, self.weight, self.weight_scale, self.group_size, self.rows_per_block, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, int4 in groups of "
            f"{self.group_size} (rows in blocks of {self.rows_per_block})"
        )
