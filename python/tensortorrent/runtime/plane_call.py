"""One call on the data plane: its values by buffer, and the callbacks the core enters.

The core runs Load, Spill, Reload and Free natively; Python runs Compute, and the copies
to and from devices on the devices' own queues (runtime/device_copies.py), completing
each once its event does. A region's inputs are torch's tensors (a model weight, a user
input, a region output kept as torch made it, a device's copy of a value) or zero-copy
views of buffers the core holds in RAM (a loaded weight, a value copied back from a
device). An output that a Spill reads is written into its core buffer, so the Spill can
run natively. Torch's tensors are dropped after their last reader, when the program
frees them; an output that views a core buffer is copied out, because the core reuses
that buffer's bytes once it is freed.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

from .. import core
from ..backends.interface import Queue
from ..planning.layer_split import join_features
from ..planning.lowering import LoweredProgram
from .autograd_copies import CopyOverLink, WeightCopies, start_copy
from .call_threads import running_a_call
from .device_copies import DeviceLink, reverse_links
from .program_runner import ProgramRunner, detach_outputs, update_buffers


@dataclass(frozen=True)
class ComputeStep:
    """What one Compute instruction does, worked out once per program."""

    forward: Callable[..., tuple]  # the region's kernel
    reads: tuple[int, ...]  # buffer per input
    writes: tuple[int, ...]  # buffer per output
    counted: tuple[int, ...]  # reads that are torch's transient tensors, dropped after their last reader
    plain: bool  # every read and write is torch's or a preset value: no views, nothing carried
    # On a device: its compute queue (a stream of its own), where its kernels run; the
    # instruction completes when an event after them does, so its readers on other queues
    # start only then (the copies in flight on the device's other queues are not waited
    # for). None on the CPU.
    queue: Queue | None = None


@dataclass(frozen=True)
class CopyStep:
    """What one Copy to or from a device does, worked out once per program."""

    link: DeviceLink
    back: DeviceLink  # the reverse link, which a gradient of the copied values goes back over
    pairs: tuple[tuple[int, int], ...]  # (source, target) buffers whose value has bytes
    counted: tuple[int, ...]  # sources that are torch's transient tensors, dropped after their last reader


@dataclass(frozen=True)
class CallSteps:
    """Everything a call's callbacks need, fixed per program."""

    computes: dict[int, ComputeStep]
    copies: dict[int, CopyStep]
    readers: list[int]  # per buffer: its Compute and Copy readers, where it is torch's transient tensor
    held: dict[int, Any]  # preset buffers on a device: the device's own copy of the bound value
    weights: frozenset[int]  # preset buffers holding a bound tensor (a weight)


def call_steps(
    runner: ProgramRunner,
    lowered: LoweredProgram,
    links: dict[int, DeviceLink],
    held: dict[int, Any],
    devices: dict[str, tuple[Any, int]],
) -> CallSteps:
    """`devices`: per device name (its compute queue's), its backend and index there."""
    program = lowered.program
    buffers, outputs = program.buffers, set(program.outputs)
    readers = [0] * len(buffers)
    instructions, queues = {i.id: i for i in program.schedule.instructions}, program.queues
    copies = [i for i in instructions.values() if i.kind == core.InstructionKind.Copy]
    for reads in [r for r, _ in lowered.operands.values()] + [i.reads for i in copies]:
        for buffer in reads:
            spec = buffers[buffer]
            if spec.torch_owned and spec.lifetime == core.BufferLifetime.Transient and buffer not in outputs:
                readers[buffer] += 1
    special = set(lowered.views) | set(lowered.carried)
    computes = {}
    kernels: dict[tuple[int, str], Callable[..., tuple]] = {}  # (region, torch device) -> its kernel there
    compute_queues = {name: backend.queue(index) for name, (backend, index) in devices.items()}
    for ident, (reads, writes) in lowered.operands.items():
        region = lowered.region_of[ident]
        device = devices.get(queues[instructions[ident].queue].name)
        where = device[0].torch_device(device[1]) if device is not None else torch.device("cpu")
        if (region, str(where)) not in kernels:
            kernels[(region, str(where))] = runner.kernels[region].forward_on(where)
        forward = kernels[(region, str(where))]
        computes[ident] = ComputeStep(
            forward=join_features if ident in lowered.joined else forward,
            reads=reads,
            writes=writes,
            counted=tuple(b for b in reads if readers[b]),
            plain=not special.intersection(reads) and not special.intersection(writes),
            queue=compute_queues[queues[instructions[ident].queue].name] if device is not None else None,
        )
    steps = {}
    back = reverse_links(program, links)
    for instruction in copies:
        pairs = tuple((s, t) for s, t in zip(instruction.reads, instruction.writes) if t not in lowered.carried)
        counted = tuple(b for b in instruction.reads if readers[b])
        steps[instruction.id] = CopyStep(links[instruction.queue], back[instruction.queue], pairs, counted)
    weights = frozenset(buffer for buffer, slot in lowered.preset if slot < runner.bound_count)
    return CallSteps(computes, steps, readers, held, weights)


class PlaneCall:
    """The values of one call; its Compute instructions may run on several threads."""

    def __init__(
        self,
        runner: ProgramRunner,
        lowered: LoweredProgram,
        plane: core.DataPlane,
        memory,
        flat_inputs: list[Any],
        steps: CallSteps,
        grad: bool = False,
    ) -> None:
        """With `grad`, autograd records the call: its regions compute with grad enabled,
        its copies are differentiable (CopyOverLink), and every value a region or copy
        makes is torch's own tensor, never a view of the core's buffers, whose bytes the
        core reuses while autograd may still hold them."""
        self._runner, self._lowered, self._plane, self._memory = runner, lowered, plane, memory
        self._steps = steps
        self._grad = grad
        self._weight_copies = WeightCopies() if grad else None
        values = runner.call_values(flat_inputs, grad)
        self.env: list[Any] = [None] * len(lowered.program.buffers)
        updated = runner.mutated_bound_slots if grad else ()
        for buffer, slot in lowered.preset:
            held = steps.held.get(buffer)
            if held is not None and slot in updated:
                held = held.clone()  # as call_values reads it (see there)
            self.env[buffer] = held if held is not None else preset_value(lowered, buffer, values[slot])
        self._readers_left = list(steps.readers)
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
        torch.set_grad_enabled(self._grad)  # grad mode is per thread
        step = self._steps.computes[instruction_id]
        with running_a_call:
            if step.queue is None:
                self._run(step)
            else:
                with step.queue.launching(), self._saving_weights(step):
                    self._run(step)
                step.queue.record().wait()
        self._read(step.counted)

    def _saving_weights(self, step: ComputeStep) -> contextlib.AbstractContextManager:
        """Where autograd records the call: the weights copied to the device for this
        region are saved for backward as copies to make again (runtime/autograd_copies.py)."""
        if self._weight_copies is None:
            return contextlib.nullcontext()
        return self._weight_copies.saved_as_copies(step.reads, [self.value(b) for b in step.reads])

    def _run(self, step: ComputeStep) -> None:
        env = self.env
        if step.plain:  # the common case on the CPU: torch's tensors in, torch's tensors out
            outputs = step.forward(*[env[b] for b in step.reads])
            for buffer, value in zip(step.writes, outputs):
                env[buffer] = value
        else:
            self._compute_with_views(step)

    def copy(self, instruction_id: int, done: Callable[[BaseException | None], None]) -> None:
        """Starts a Copy to or from a device on its link's queue; `done` ends it once the
        queue's event after it completes (from the link's waiter thread)."""
        step = self._steps.copies[instruction_id]
        link, env, views = step.link, self.env, self._lowered.views
        for source, target in step.pairs:
            value = self.value(source)
            if self._grad:
                env[target] = (
                    CopyOverLink.apply(value, link, step.back) if value.requires_grad else start_copy(link, value)
                )
                if source in self._steps.weights:
                    self._weight_copies.copied(target, value, link)
            elif target in views:  # a value coming back into the core's RAM
                link.queue.copy(self.value(target), value)
            else:
                env[target] = start_copy(link, value)
        link.waiter.after(link.queue.record(), lambda error: self._copied(step, done, error))

    def _copied(self, step: CopyStep, done, error: BaseException | None) -> None:
        if error is None:
            self._read(step.counted)
        done(error)

    def _read(self, buffers: tuple[int, ...]) -> None:
        """One more reader of each of `buffers` has finished; the last one drops the value."""
        if not buffers:
            return
        with self._lock:
            for buffer in buffers:
                self._readers_left[buffer] -= 1
                if self._readers_left[buffer] == 0:
                    self.env[buffer] = None

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

    def drop(self) -> None:
        """Lets go of every value of the call."""
        self.env[:] = [None] * len(self.env)

    def finish(self) -> Any:
        """Applies buffer mutations and assembles the user's output structure from RAM."""
        lowered = self._lowered
        update_buffers(self._runner.mutations, [self.value(b) if b is not None else None for b in lowered.mutations])
        flat = []
        for buffer, constant in lowered.outputs:
            if buffer is None:
                flat.append(constant)
                continue
            value = self.value(buffer)
            # A core buffer goes back to the pool with the call: the caller gets its own copy.
            flat.append(value.clone() if buffer in lowered.views and self.env[buffer] is None else value)
        outputs = pytree.tree_unflatten(self._runner.as_eager_lays_out(flat), self._runner.out_spec)
        return outputs if self._grad else detach_outputs(outputs)


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
