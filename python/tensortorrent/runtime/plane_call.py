"""One call on the data plane: its values by buffer, and the Compute callback the core enters.

The core runs Load, Copy and Free natively; Python sees only Compute. A region's inputs are
torch's tensors (a model weight, a user input, a region output kept as torch made it) or
zero-copy views of buffers the core holds (a loaded weight, a copy on another tier). An
output that a Copy reads is written into its core buffer, so the Copy can run natively.
Torch's tensors are dropped after their last Compute reader, when the program frees them;
an output that views a core buffer is copied out, because the core reuses that buffer's
bytes once it is freed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

from .. import _core
from ..planning.layer_split import join_features
from ..planning.lowering import LoweredProgram
from .program_runner import ProgramRunner, detach_outputs


@dataclass(frozen=True)
class ComputeStep:
    """What one Compute instruction does, worked out once per program."""

    forward: Callable[..., tuple]  # the region's kernel
    reads: tuple[int, ...]  # buffer per input
    writes: tuple[int, ...]  # buffer per output
    counted: tuple[int, ...]  # reads that are torch's transient tensors, dropped after their last reader
    plain: bool  # every read and write is torch's or a preset value: no views, nothing carried


def compute_steps(runner: ProgramRunner, lowered: LoweredProgram, readers: list[int]) -> dict[int, ComputeStep]:
    special = set(lowered.views) | set(lowered.carried)
    steps = {}
    for ident, (reads, writes) in lowered.operands.items():
        forward = runner.kernels[lowered.region_of[ident]].forward
        steps[ident] = ComputeStep(
            forward=join_features if ident in lowered.joined else forward,
            reads=reads,
            writes=writes,
            counted=tuple(b for b in reads if readers[b]),
            plain=not special.intersection(reads) and not special.intersection(writes),
        )
    return steps


class PlaneCall:
    """The values of one call; its Compute instructions may run on several threads."""

    def __init__(
        self,
        runner: ProgramRunner,
        lowered: LoweredProgram,
        plane: _core.DataPlane,
        memory,
        flat_inputs: list[Any],
        steps: dict[int, ComputeStep],
        readers: list[int],
        bound_inputs: tuple[int, ...],
    ) -> None:
        """`steps`: per Compute instruction, what it does; `readers`: per buffer, the Compute
        instructions that read it (torch's tensors only); `bound_inputs`: input buffers a
        Copy reads, whose memory the core is told."""
        self._runner, self._lowered, self._plane, self._memory = runner, lowered, plane, memory
        self._steps = steps
        values = runner.bound_values + list(flat_inputs)
        self.env: list[Any] = [None] * len(lowered.program.buffers)
        for buffer, slot in lowered.preset:
            self.env[buffer] = preset_value(lowered, buffer, values[slot])
        for buffer in bound_inputs:
            tensor = self.env[buffer].contiguous()  # kept for the call: the core reads its bytes
            self.env[buffer] = tensor
            memory.bind(buffer, tensor.data_ptr(), tensor.nbytes)
        self._readers_left = list(readers)
        self._lock = threading.Lock()

    def value(self, buffer: int) -> Any:
        """A buffer's value: torch's tensor, a view of the core's bytes, or a carried value."""
        carried = self._lowered.carried
        while buffer in carried:
            buffer = carried[buffer]
        view = self._lowered.views.get(buffer)
        if view is not None and self.env[buffer] is None:
            dtype, shape = view
            return self._plane.view(self._memory, buffer).view(dtype).reshape(shape)
        return self.env[buffer]

    def compute(self, instruction_id: int) -> None:
        """Runs a Compute instruction's region (on an executor thread or the caller's)."""
        torch.set_grad_enabled(False)  # grad mode is per thread
        step = self._steps[instruction_id]
        env = self.env
        if step.plain:  # the common case on the CPU: torch's tensors in, torch's tensors out
            outputs = step.forward(*[env[b] for b in step.reads])
            for buffer, value in zip(step.writes, outputs):
                env[buffer] = value
        else:
            self._compute_with_views(step)
        if step.counted:
            with self._lock:
                for buffer in step.counted:
                    self._readers_left[buffer] -= 1
                    if self._readers_left[buffer] == 0:
                        env[buffer] = None

    def _compute_with_views(self, step: ComputeStep) -> None:
        views, env = self._lowered.views, self.env
        inputs = [self.value(b) for b in step.reads]
        outputs = step.forward(*inputs)
        held = [_span(t) for b, t in zip(step.reads, inputs) if b in views and isinstance(t, torch.Tensor)]
        for buffer, value in zip(step.writes, outputs):
            if buffer in views:
                self.value(buffer).copy_(value)
            elif held and isinstance(value, torch.Tensor) and _inside(value, held):
                env[buffer] = value.clone()  # it views a core buffer that will be reused
            else:
                env[buffer] = value

    def finish(self) -> Any:
        """Applies buffer mutations and assembles the user's output structure from RAM."""
        lowered = self._lowered
        for buffer, (_, target) in zip(lowered.mutations, self._runner.mutations):
            target.copy_(self.value(buffer))
        flat = []
        for buffer, constant in lowered.outputs:
            if buffer is None:
                flat.append(constant)
                continue
            value = self.value(buffer)
            # A core buffer goes back to the pool with the call: the caller gets its own copy.
            flat.append(value.clone() if buffer in lowered.views else value)
        return detach_outputs(pytree.tree_unflatten(flat, self._runner.out_spec))


def preset_value(lowered: LoweredProgram, buffer: int, value: Any) -> Any:
    """What a preset buffer holds: its slot's value, or the rows of it a split layer's side reads."""
    rows = lowered.parts.get(buffer)
    return value if rows is None else value[rows[0] : rows[1]]


def _span(tensor: torch.Tensor) -> tuple[int, int]:
    start = tensor.untyped_storage().data_ptr()
    return start, start + tensor.untyped_storage().nbytes()


def _inside(tensor: torch.Tensor, spans: list[tuple[int, int]]) -> bool:
    address = tensor.untyped_storage().data_ptr()
    return tensor.numel() > 0 and any(begin <= address < end for begin, end in spans)
