"""The early-fit gate: refuse, before any heavy work, a model no budget can hold."""

from __future__ import annotations

from torch import nn

from ..errors import MemoryCapacityError
from ..hardware.budgets import Budgets
from ..observe.units import format_bytes


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the model's parameters and buffers, each tensor counted once (tied weights)."""
    seen: set[int] = set()
    total = 0
    for tensor in (*model.parameters(), *model.buffers()):
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor.numel() * tensor.element_size()
    return total


def check_fits(needed: int, budgets: Budgets) -> None:
    """Raises MemoryCapacityError when `needed` bytes exceed all memory tiers together."""
    tiers = budgets.memory_tiers
    available = sum(tier.amount for tier in tiers)
    if needed > available:
        per_tier = "; ".join(f"{t.tier}: {format_bytes(t.amount)} ({t.source}: {t.detail})" for t in tiers)
        raise MemoryCapacityError(
            f"the model's weights need {needed} bytes ({format_bytes(needed)}), but all budgets together "
            f"allow {available} bytes ({format_bytes(available)}): {per_tier}"
        )
