"""The elementwise activations a oneDNN kernel applies to its output as it writes it (a
post-op), saving the passes over the output that aten's separate ops make: on GPT-2's
128 x 768 x 3072 product here, the tanh GELU as GPT-2 writes it (eight aten ops) took
longer than the product itself, and as a post-op almost nothing."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional


@dataclass(frozen=True)
class Activation:
    name: str
    attr: str  # oneDNN's post-op
    algorithm: str  # GELU's: "none" (erf) or "tanh"; "" for the others

    def on_aten(self, y: torch.Tensor) -> torch.Tensor:
        """aten's own: what the post-op replaces (its reference, and what it is timed against)."""
        if self.attr == "gelu":
            return functional.gelu(y, approximate=self.algorithm)
        return torch.relu(y) if self.attr == "relu" else functional.silu(y)


RELU = Activation("relu", "relu", "")
GELU = Activation("gelu", "gelu", "none")
GELU_TANH = Activation("gelu (tanh)", "gelu", "tanh")
SILU = Activation("silu", "swish", "")
ACTIVATIONS = (RELU, GELU, GELU_TANH, SILU)
