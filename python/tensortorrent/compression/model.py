"""A model's copy with its linear layers' weights compressed (CompileConfig.weight_format).

The copy shares every other module, parameter and buffer with the model, which is left
as it was: only the modules on the path to a compressed layer are copied (shallowly,
their children replaced). Linear layers are torch's nn.Linear and transformers' Conv1D
(GPT-2's, its weight stored [in, out]); other tensors (embeddings, norms, a mixture of
experts' stacked experts) stay as they are.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..units import format_bytes
from .int8_linear import Int8Linear


def compressed_model(model: nn.Module, weight_format: str | None) -> nn.Module:
    """`model` itself for None, else its copy with every linear layer in `weight_format`."""
    if weight_format is None:
        return model
    return _compressed(model)


def _compressed(module: nn.Module) -> nn.Module:
    layer = _as_int8(module)
    if layer is not None:
        return layer
    children = {name: _compressed(child) if child is not None else None for name, child in module._modules.items()}
    if all(children[name] is child for name, child in module._modules.items()):
        return module  # nothing below changed: shared as it is
    clone = copy.copy(module)  # shares its parameters, buffers and hooks; its children are its own
    clone._modules = children
    return clone


def _as_int8(module: nn.Module) -> Int8Linear | None:
    if isinstance(module, nn.Linear) and module.weight.is_floating_point():
        return Int8Linear.of(module.weight, module.bias)
    if type(module).__name__ == "Conv1D" and hasattr(module, "nf") and module.weight.dim() == 2:
        return Int8Linear.of(module.weight.t(), module.bias)  # transformers' Conv1D: weight [in, out]
    return None


def weight_format_summary(bound) -> str | None:
    """explain()'s line on a program's int8 layers (from its bound tensors, so a loaded
    artifact says it too) and their bytes; None where it has none."""
    by_name = {name: b.tensor for b in bound for name in b.names}
    layers = [
        (values, by_name[name + "_scale"])
        for name, values in by_name.items()
        if values.dtype == torch.int8 and name.endswith(".weight") and name + "_scale" in by_name
    ]
    if not layers:
        return None
    compressed = sum(values.nbytes + scale.nbytes for values, scale in layers)
    full = sum(values.numel() * scale.element_size() for values, scale in layers)
    return (
        f"int8 weight-only, one scale per output channel: {len(layers)} linear layers, {format_bytes(compressed)} "
        f"(in {str(layers[0][1].dtype).removeprefix('torch.')}: {format_bytes(full)}); other tensors as they were"
    )
