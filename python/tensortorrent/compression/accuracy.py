"""What compressing the weights cost in accuracy, measured at compile on the example inputs."""

from __future__ import annotations

import torch
import torch.utils._pytree as pytree
from torch import nn

from ..capture.export import eval_mode

# A compile with weight_format reads a compressed checkpoint (tt.quantize_checkpoint's).
NOT_MEASURED_FROM_CHECKPOINT = "not measured: a compressed checkpoint holds no float weights to compare with"


def measured_accuracy(compiled, model: nn.Module, args: tuple, kwargs: dict, inputs: str = "the example inputs") -> str:
    """explain()'s line comparing `compiled` (compressed) with the float `model`, run
    eagerly in eval mode, on `args` and `kwargs` (described as `inputs`): the largest difference, the
    cosine of all floating outputs, and where the output has logits (a language model's),
    how often their top token agrees."""
    with torch.no_grad(), eval_mode(model):  # compiled modules compute eval mode's outputs
        want = model(*args, **kwargs)
    got = compiled(*args, **kwargs)
    pairs = [
        (g.detach().double().flatten(), w.detach().double().flatten())
        for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want))
        if isinstance(g, torch.Tensor) and isinstance(w, torch.Tensor) and g.is_floating_point() and g.shape == w.shape
    ]
    if not pairs:
        return "not measured: no floating output to compare"
    got_all, want_all = torch.cat([g for g, _ in pairs]), torch.cat([w for _, w in pairs])
    largest = (got_all - want_all).abs().max().item()
    cosine = torch.nn.functional.cosine_similarity(got_all, want_all, dim=0).item()
    text = f"against the float weights on {inputs}: largest difference {largest:.3g}, cosine {cosine:.6f}"
    logits_of = _logits(got), _logits(want)
    if all(isinstance(x, torch.Tensor) for x in logits_of):
        agree = (logits_of[0].argmax(-1) == logits_of[1].argmax(-1)).double().mean().item()
        text += f", top-1 agreement of the logits {agree:.3f}"
    return text


def _logits(output) -> torch.Tensor | None:
    if isinstance(output, dict) and isinstance(output.get("logits"), torch.Tensor):
        return output["logits"]
    return None
