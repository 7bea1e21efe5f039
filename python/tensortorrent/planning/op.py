"""One instruction of a program while the lowering builds it, before it gets its id."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Op:
    kind: object  # core.InstructionKind
    queue: int
    reads: list[int]
    writes: list[int]
    deps: set[int]
    label: str
    seconds: float  # predicted; -1: derived from the bytes it moves
    declared_s: float = 0.0  # a virtual device's declared duration
    region: int = -1
