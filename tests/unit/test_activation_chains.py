"""Activations found after a kernel's output however the model writes them
(runtime/activation_chains.py): one aten op, or GPT-2's tanh GELU op by op; and none where
the chain is read elsewhere or computes something else."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional

from tensortorrent.hardware.activations import GELU, GELU_TANH, RELU, SILU
from tensortorrent.runtime.activation_chains import activation_after


def gpt2_gelu(y):
    """GPT-2's NewGELUActivation, as transformers writes it."""
    return 0.5 * y * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * torch.pow(y, 3.0))))


class Then(nn.Module):
    """A linear, then `after` of its output."""

    def __init__(self, after) -> None:
        super().__init__()
        self.linear, self.after = nn.Linear(8, 8), after

    def forward(self, x):
        return self.after(self.linear(x))


def found(after):
    """The activation_after the linear's node of `Then(after)`, as export captures it."""
    graph = torch.export.export(Then(after), (torch.randn(2, 8),)).graph_module.graph
    (linear,) = [n for n in graph.nodes if n.target == torch.ops.aten.linear.default]
    return activation_after(linear)


@pytest.mark.parametrize(
    "after, expected, length",
    [
        (torch.relu, RELU, 1),
        (functional.gelu, GELU, 1),
        (lambda y: functional.gelu(y, approximate="tanh"), GELU_TANH, 1),
        (gpt2_gelu, GELU_TANH, 8),
        (functional.silu, SILU, 1),
        (lambda y: y * torch.sigmoid(y), SILU, 2),
        (lambda y: 0.5 * y * (1.0 + torch.erf(y / math.sqrt(2.0))), GELU, 5),
    ],
    ids=["relu", "gelu", "gelu-tanh", "gpt2-gelu", "silu", "silu-by-hand", "gelu-by-hand"],
)
def test_an_activation_is_found_however_it_is_written(after, expected, length):
    activation, chain = found(after)
    assert activation == expected and len(chain) == length


@pytest.mark.parametrize(
    "after",
    [
        lambda y: y * 2.0,  # elementwise, but no activation
        lambda y: torch.relu(y) + y,  # the output read beside the activation
        lambda y: (lambda t: t * (1.0 + t))(torch.tanh(y)),  # a value inside the chain read twice
        lambda y: torch.relu(y.sum(dim=-1)),  # not elementwise
        lambda y: torch.relu(y.to(torch.float64)),  # another dtype
        lambda y: torch.relu(torch.clamp(y, max=30.0)),  # a relu only up to 30
    ],
    ids=["scaled", "output-read-twice", "not-an-activation", "reduced", "cast", "clamped-far-out"],
)
def test_no_activation_where_the_chain_computes_another_thing_or_is_read_elsewhere(after):
    assert found(after) is None
