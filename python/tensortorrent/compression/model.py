"""A model's copy with its linear layers' and embeddings' weights compressed (CompileConfig.weight_format).

The copy shares every other module, parameter and buffer with the model, which is left
as it was: only the modules on the path to a compressed layer are copied (shallowly,
their children replaced). Linear layers are torch's nn.Linear and transformers' Conv1D
(GPT-2's, its weight stored [in, out]); embeddings are nn.Embedding itself (a subclass
may change what a lookup computes; one that renormalizes rows, max_norm, writes its
table). Other tensors (norms, biases) stay as they are.
In "int4", a table whose shape the int4 layout cannot hold (int4_linear.fits_int4) is
int8, and so is an embedding's unless a linear layer shares it. A table shared by
several modules (a head tied to its embedding) is compressed once, and stays shared.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..units import format_bytes
from .embedding import CompressedEmbedding
from .int4_linear import Int4Linear, fits_int4
from .int8_experts import Int8Experts, stacked_experts
from .int8_linear import Int8Linear

CompressedLinear = Int8Linear | Int4Linear
COMPRESSED_MODULES = (Int8Linear, Int4Linear, CompressedEmbedding, Int8Experts)


def compressed_model(
    model: nn.Module, weight_format: str | None, group_size: int = 128, rows_per_block: int | None = None
) -> nn.Module:
    """`model` itself for None, else its copy with every linear layer and embedding in
    `weight_format`; int4 values in blocks of `rows_per_block` rows (None: this machine's
    kernel's, int4_linear.stored_rows_per_block)."""
    if weight_format is None:
        return model
    heads = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    return _Compressor(weight_format, group_size, rows_per_block, heads).copy_of(model)


class _Compressor:
    def __init__(self, weight_format: str, group_size: int, rows_per_block: int | None, heads: set[int]) -> None:
        self.weight_format, self.group_size, self.rows_per_block = weight_format, group_size, rows_per_block
        self.heads = heads  # id() of the weights of linear layers (nn.Linear's: [out, in], as an embedding's)
        self.tables: dict[tuple[int, bool], CompressedLinear] = {}  # (id(weight), transposed) -> its compressed table

    def copy_of(self, module: nn.Module) -> nn.Module:
        replaced = self._replacement(module)
        if replaced is not None:
            return replaced
        children = {name: self.copy_of(child) if child is not None else None for name, child in module._modules.items()}
        if all(children[name] is child for name, child in module._modules.items()):
            return module  # nothing below changed: shared as it is
        clone = copy.copy(module)  # shares its parameters, buffers and hooks; its children are its own
        clone._modules = children
        return clone

    def _replacement(self, module: nn.Module) -> nn.Module | None:
        if stacked_experts(module):
            return Int8Experts.of(module)
        if type(module) is nn.Embedding and module.weight.is_floating_point() and module.max_norm is None:
            # A lookup reads the few rows of its tokens, never the whole table, so int4 would
            # save disk and RAM only, at int4's error: a table no head shares is int8.
            weight_format = self.weight_format if id(module.weight) in self.heads else "int8"
            return CompressedEmbedding(self._table(module.weight, transposed=False, weight_format=weight_format))
        weight = float_weight(module)
        if weight is None:
            return None
        transposed = weight is not module.weight
        return self._table(module.weight, transposed, self.weight_format).sharing(module.bias)

    def _table(self, weight: torch.Tensor, transposed: bool, weight_format: str) -> CompressedLinear:
        key = (id(weight), transposed)
        if key not in self.tables:
            rows_by_features = weight.t() if transposed else weight
            self.tables[key] = compressed_layer(
                rows_by_features, None, weight_format, self.group_size, self.rows_per_block
            )
        return self.tables[key]


def float_weight(module: nn.Module) -> torch.Tensor | None:
    """A linear layer's float weight as [out, in]; None for any other module."""
    if isinstance(module, nn.Linear) and module.weight.is_floating_point():
        return module.weight
    if type(module).__name__ == "Conv1D" and hasattr(module, "nf") and module.weight.dim() == 2:
        return module.weight.t()  # transformers' Conv1D: weight [in, out]
    return None


def compressed_layer(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    weight_format: str,
    group_size: int,
    rows_per_block: int | None = None,
) -> CompressedLinear:
    """The layer of float `weight` [out, in] in `weight_format`, int8 where int4 does not fit."""
    if weight_format == "int4" and fits_int4(*weight.shape, group_size):
        return Int4Linear.of(weight, bias, group_size, rows_per_block)
    return Int8Linear.of(weight, bias)


def weight_format_summary(bound) -> str | None:
    """explain()'s line on a program's compressed tables (linear layers, embeddings and
    stacked experts, a tied one once; from its bound tensors, so a loaded artifact says it
    too) and their bytes; None where it has none."""
    by_name = {name: b.tensor for b in bound for name in b.names}
    tables = {
        id(values): (values, by_name[name + "_scale"])
        for name, values in by_name.items()
        if values.dtype in (torch.int8, torch.uint8) and name + "_scale" in by_name
    }
    layers = list(tables.values())
    if not layers:
        return None
    kinds = []
    for dtype, stacked, kind in (
        (torch.uint8, False, "int4 in groups of {group}"),
        (torch.int8, False, "int8 one scale per output channel"),
        (torch.int8, True, "int8 stacked expert projections"),
    ):
        chosen = [
            (values, scale) for values, scale in layers if values.dtype == dtype and (values.dim() == 3) == stacked
        ]
        if chosen:
            values, scale = chosen[0]
            group = values.shape[1] * 2 // scale.shape[1] if dtype == torch.uint8 else 0
            kinds.append(f"{len(chosen)} {kind.format(group=group)}")
    compressed = sum(values.nbytes + scale.nbytes for values, scale in layers)
    full = sum(_float_bytes(values, scale) for values, scale in layers)
    dtype = str(layers[0][1].dtype).removeprefix("torch.")
    return (
        f"weight-only compressed tables (linear layers, embeddings, experts): {', '.join(kinds)}; "
        f"{format_bytes(compressed)} (in {dtype}: {format_bytes(full)}); other tensors as they were"
    )


def formats_computed(nodes) -> str:
    """explain()'s mark of a region's compressed products: "[int8]", "[int4]", both, or ""."""
    ops = {
        torch.ops.tensortorrent.int8_linear.default: "int8",
        torch.ops.tensortorrent.int8_grouped_linear.default: "int8",
        torch.ops.tensortorrent.int4_linear.default: "int4",
    }
    kinds = sorted({ops[node.target] for node in nodes if node.target in ops}, key=["int4", "int8"].index)
    return f" [{'+'.join(kinds)}]" if kinds else ""


def _float_bytes(values: torch.Tensor, scale: torch.Tensor) -> int:
    """The bytes of the float table that `values` and `scale` hold compressed (int4's
    values pack two to a byte, its scales one row per output row)."""
    if values.dtype == torch.uint8:
        return scale.shape[0] * values.shape[1] * 2 * scale.element_size()
    return scale.numel() * values.shape[-1] * scale.element_size()
