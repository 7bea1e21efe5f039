"""The early-fit gate: refuse, before any heavy work, a model no plan could hold."""

from __future__ import annotations

from torch import nn

from ..errors import MemoryCapacityError
from ..hardware.budgets import Budgets
from ..units import format_bytes


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the model's parameters and buffers, each tensor counted once (tied weights)."""
    seen: set[int] = set()
    total = 0
    for tensor in (*model.parameters(), *model.buffers()):
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor.numel() * tensor.element_size()
    return total


def check_fits(needed: int, budgets: Budgets, streaming_refused: bool = False) -> None:
    """Raises MemoryCapacityError when `needed` bytes of weights exceed the host RAM budget
    (saying so when `streaming_refused`: the config forbids streaming them from disk).

    A plan whose weights do not stream from disk holds all of them in host RAM for the
    whole call (a device's resident weights are copies of RAM's, see planning/lowering.py),
    so the RAM budget is the one that decides whether the model can run at all.
    """
    ram = budgets.ram
    if needed > ram.amount:
        raise MemoryCapacityError(
            f"the model's weights need {needed} bytes ({format_bytes(needed)}), but host RAM, where a plan "
            f"keeps them, allows {ram.amount} bytes ({format_bytes(ram.amount)}): "
            f"ram: {format_bytes(ram.amount)} ({ram.source}: {ram.detail})"
            + ("; CompileConfig.allow_disk_streaming=False keeps them all there" if streaming_refused else "")
        )
