"""Which activation the elementwise nodes after a kernel compute of its output, wherever
they are written out op by op.

Models write the same activation many ways: aten.relu, aten.gelu, F.silu, or GPT-2's tanh
GELU as eight multiplications, additions, a power and a tanh. Rather than a pattern per
spelling, the chain is found by its structure (pointwise aten ops that read the kernel's
output and each other alone, one of them read outside) and identified by its values: it
is evaluated on a probe of inputs and compared with each activation oneDNN can fuse.
"""

from __future__ import annotations

import torch
from torch import fx

from ..hardware.activations import ACTIVATIONS, Activation

# The longest chain looked for (GPT-2's GELU takes eight nodes), and how many nodes after
# the kernel's output are looked at to find it (others of the graph may come between).
MAX_CHAIN = 12
MAX_SCANNED = 64
# Where activations bend, finely, and far out on both sides (a chain that only agreed
# near zero, such as one that clamps large values, is not the activation).
PROBE = torch.cat([torch.linspace(-8.0, 8.0, 257), torch.tensor([-1e3, -1e2, -20.0, 20.0, 1e2, 1e3])])


def activation_after(node: fx.Node) -> tuple[Activation, tuple[fx.Node, ...]] | None:
    """The activation that the pointwise nodes reading `node` alone compute of it, and those
    nodes in graph order (the last holds the activation's values); None where no such
    chain computes one, or where something else reads `node` or a value inside the chain."""
    inside, chain = {node}, []
    candidate = node.next
    for _ in range(MAX_SCANNED):
        if candidate.op == "output" or len(chain) == MAX_CHAIN:
            return None
        if _extends(candidate, inside):
            inside.add(candidate)
            chain.append(candidate)
            if _closed(node, chain):
                activation = _identified(node, chain)
                if activation is not None:
                    return activation, tuple(chain)
        candidate = candidate.next
    return None


def _extends(node: fx.Node, inside: set[fx.Node]) -> bool:
    """Whether `node` is a pointwise aten op whose tensor inputs are all inside the chain."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    if torch.Tag.pointwise not in node.target.tags:
        return False
    inputs = node.all_input_nodes
    return bool(inputs) and all(n in inside for n in inputs)


def _closed(start: fx.Node, chain: list[fx.Node]) -> bool:
    """Whether only the chain reads `start` and every node of it but the last."""
    members = set(chain)
    return all(user in members for n in (start, *chain[:-1]) for user in n.users)


def _identified(start: fx.Node, chain: list[fx.Node]) -> Activation | None:
    """The activation whose values the chain computes of `start`'s on the probe, if any,
    where its output keeps the shape and dtype of `start`'s."""
    first, last = start.meta.get("val"), chain[-1].meta.get("val")
    if not isinstance(first, torch.Tensor) or not isinstance(last, torch.Tensor):
        return None
    if last.shape != first.shape or last.dtype != first.dtype or not first.dtype.is_floating_point:
        return None
    values = {start: PROBE}
    try:
        for n in chain:
            args, kwargs = fx.map_arg((n.args, n.kwargs), lambda a: values[a])
            values[n] = n.target(*args, **kwargs)
    except (RuntimeError, TypeError):  # an op that cannot run on the probe: not an activation
        return None
    result = values[chain[-1]]
    for activation in ACTIVATIONS:
        if torch.allclose(result, activation.on_aten(PROBE), rtol=1e-5, atol=1e-6):
            return activation
    return None
