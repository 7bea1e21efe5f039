"""Region kernels over one flat environment of value slots, and the inline run of one call."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import fx

from ..capture.program import NormalizedProgram, value_bytes
from ..partition import Region, build_region_module
from ..planning.profile_cache import region_key
from ..storage.mapped_weights import is_mapped
from .device_kernels import DeviceKernels
from .region_backends import EAGER, INDUCTOR, RegionBackends, RegionChoice


@dataclass(frozen=True)
class RegionKernel:
    """The code of one region and the slots it reads and writes."""

    # The captured graph's forward, or what replaced it on the CPU (runtime/region_backends.py).
    forward: Callable[..., tuple]
    module: fx.GraphModule  # the captured graph
    on_devices: DeviceKernels  # its kernels on accelerators (runtime/device_kernels.py)
    in_slots: tuple[int, ...]
    out_slots: tuple[int, ...]
    transient_in_slots: tuple[int, ...]  # activations whose last reader may be this region
    profile_key: str  # what its measured time is cached under (planning/profile_cache.py)
    compiled: bool = False  # `forward` is inductor's code for `module` (runtime/region_backends.py)
    held_bytes: int = 0  # what `forward` keeps in RAM for the program's life (packed weights)

    def forward_on(self, device: torch.device) -> Callable[..., tuple]:
        """The kernel for `device`: this one on the CPU, else the one made for that device
        (runtime/device_kernels.py)."""
        return self.forward if device.type == "cpu" else self.on_devices.forward(device)


class ProgramRunner:
    """Runs a partitioned program: immutable after construction, shared by all calls."""

    def __init__(
        self, program: NormalizedProgram, regions: Sequence[Region], backends: RegionBackends | None = None
    ) -> None:
        """`backends`: the regions' compiled kernels (runtime/region_backends.py); None runs
        every region's graph eagerly."""
        slot_of: dict[fx.Node, int] = dict(program.slot_of)
        for region in regions:
            for node in region.out_nodes:
                slot_of[node] = len(slot_of)
        self.slot_count = len(slot_of)
        self.bound_count = len(program.bound)
        self.slot_bytes = [0] * self.slot_count  # planned size of each value, from export's metadata
        # Per slot: (dtype, shape) of a value that is one tensor of static shape, else None.
        self.slot_meta: list[tuple[torch.dtype, tuple[int, ...]] | None] = [None] * self.slot_count
        for node, slot in slot_of.items():
            self.slot_bytes[slot] = value_bytes(node)
            self.slot_meta[slot] = _tensor_meta(node)
        self.input_slots = tuple(program.input_slots)
        self._bound_values = [b.tensor for b in program.bound]

        kept = {ref.node for ref in program.outputs if ref.node is not None}
        kept.update(node for node, _ in program.buffer_mutations)
        produced = {node for region in regions for node in region.out_nodes}
        self.readers = [0] * self.slot_count  # regions reading each transient slot
        self.kernels: list[RegionKernel] = []
        for region in regions:
            transient = tuple(slot_of[n] for n in region.in_nodes if n in produced and n not in kept)
            for slot in transient:
                self.readers[slot] += 1
            module = build_region_module(program.graph_module, region, program.in_place)
            choice = backends.choices[region.index] if backends is not None else RegionChoice(EAGER)
            mode = backends.mode if backends is not None else EAGER
            forward = backends.forwards.get(region.index) if backends is not None else None
            self.kernels.append(
                RegionKernel(
                    forward=forward or module.forward,
                    module=module,
                    on_devices=DeviceKernels(module, region.in_nodes, mode, region.index),
                    in_slots=tuple(slot_of[n] for n in region.in_nodes),
                    out_slots=tuple(slot_of[n] for n in region.out_nodes),
                    transient_in_slots=transient,
                    profile_key=region_key(module, region.in_nodes) + choice.kernel_tag,
                    compiled=choice.backend == INDUCTOR,
                    held_bytes=choice.held_bytes,
                )
            )
        self.outputs = [(slot_of[r.node], None) if r.node is not None else (None, r.constant) for r in program.outputs]
        # Per output a region on packed weights makes, the memory format export recorded
        # for it (a packed convolution writes channels-last whatever eager would).
        packed = {
            slot_of[node]
            for region in regions
            if backends is not None and backends.choices[region.index].packed_kernels
            for node in region.out_nodes
        }
        formats = [
            _memory_format(r.node) if r.node is not None and slot_of[r.node] in packed else None
            for r in program.outputs
        ]
        self._output_formats = formats if any(formats) else []  # empty: nothing to restore
        self.mutations = [(slot_of[node], buffer) for node, buffer in program.buffer_mutations]
        # The bound slots of the buffers a call updates (batch norm's running statistics).
        self.mutated_bound_slots = program.mutated_slots
        # The mutations a region writes in place (their value is their buffer, no bytes of
        # their own): mutation slot -> the bound slot of its buffer.
        self.in_place = {slot_of[node]: slot_of[node.args[0]] for node in program.in_place}
        # Bound tensors mapped from their file (storage/mapped_weights.py): no RAM of the budget's.
        self.mapped_slots = frozenset(b.slot for b in program.bound if is_mapped(b.tensor))
        self.kept_slots = frozenset(slot_of[node] for node in kept)
        self.out_spec = program.out_spec
        self.own_weights = self._own_weights()
        # Per region, the bytes autograd saves for backward in a training program (set
        # before planning it: planning/saved_for_backward.py); empty for inference.
        self.saved_bytes: tuple[int, ...] = ()

    def _own_weights(self) -> dict[int, list[int]]:
        """Per region, the bound slots only it reads (and no output or mutation holds): the
        weights it may stream."""
        readers: dict[int, set[int]] = {}
        for region, kernel in enumerate(self.kernels):
            for slot in kernel.in_slots:
                if slot < self.bound_count:
                    readers.setdefault(slot, set()).add(region)
        pinned = set(self.kept_slots) | {slot for slot, _ in self.outputs if slot is not None}
        own: dict[int, list[int]] = {}
        for slot, regions in sorted(readers.items()):
            if len(regions) == 1 and slot not in pinned:
                own.setdefault(next(iter(regions)), []).append(slot)
        return own

    def as_eager_lays_out(self, flat: list[Any]) -> list[Any]:
        """The call's outputs, those of regions on packed weights in the memory format
        export recorded: a kernel on a packed weight writes a convolution's output
        channels-last, and a caller may view eager's contiguous output (`out.view(n, -1)`)
        in ways another layout refuses. Every other output is as its region made it."""
        if not self._output_formats:
            return flat
        return [
            value.contiguous(memory_format=layout)
            if layout is not None and isinstance(value, torch.Tensor) and not value.is_contiguous(memory_format=layout)
            else value
            for value, layout in zip(flat, self._output_formats, strict=True)
        ]

    @property
    def bound_values(self) -> list[Any]:
        """The bound slots' tensors (None where a weight streams in on every call)."""
        return self._bound_values

    def rebind(self, values: list[Any]) -> None:
        """Replaces the bound tensors (weights the core now holds, or None where a weight
        streams in on every call); buffer mutations follow their buffer."""
        slot_of = {id(tensor): slot for slot, tensor in enumerate(self._bound_values)}
        self.mutations = [(slot, values[slot_of[id(buffer)]]) for slot, buffer in self.mutations]
        self._bound_values = list(values)

    def on(self, device: torch.device, bound_values: list[Any]) -> ProgramRunner:
        """This program with its kernels on `device` (partition/region_module.on_device) over
        `bound_values` there, for calls run inline on that device; it applies no buffer
        mutations (a plan that has some runs on the data plane)."""
        other = copy.copy(self)
        other.kernels = [replace(k, forward=k.forward_on(device)) for k in self.kernels]
        other._bound_values = list(bound_values)
        other.mutations = []
        other.mutated_bound_slots = frozenset()
        return other

    def call_values(self, flat_inputs: list[Any], grad: bool = False) -> list[Any]:
        """A call's first values: the bound tensors, then its inputs. With `grad`, the
        buffers the call updates are read as copies: autograd may save what a region
        reads (batch norm saves its running statistics), and the update at the end of
        the call must not change what it saved."""
        values = self._bound_values + list(flat_inputs)
        if grad:
            for slot in self.mutated_bound_slots:
                values[slot] = values[slot].clone()
        return values

    def new_call(self, flat_inputs: list[Any], grad: bool = False) -> InlineCall:
        """A call run inline: a fresh environment holding the bound tensors and inputs."""
        env = self.call_values(flat_inputs, grad)
        env.extend([None] * (self.slot_count - len(env)))
        return InlineCall(self, env, grad)

    def region_inputs(self, flat_inputs: list[Any]) -> Iterator[list[Any]]:
        """Each region's input values in a call on `flat_inputs`, in region order; the
        region runs when the next one is asked for (what "auto" times regions on)."""
        call = self.new_call(flat_inputs)
        for index, kernel in enumerate(self.kernels):
            yield [call.env[slot] for slot in kernel.in_slots]
            call.run_region(index)

    def run_inline(self, flat_inputs: list[Any], grad: bool = False) -> Any:
        """Runs every region in order on the calling thread (the direct path); with
        `grad`, the outputs keep their autograd history."""
        call = self.new_call(flat_inputs, grad)
        for index in range(len(self.kernels)):
            call.run_region(index)
        return call.finish(grad)


class InlineCall:
    """One call whose regions run in order on the calling thread (the direct path and
    profiling; the data plane runs every other call)."""

    def __init__(self, runner: ProgramRunner, env: list[Any], recorded: bool = False) -> None:
        """`recorded`: autograd records the call, so each region runs its captured graph:
        the kernels that replace it (oneDNN's ops, packed weights, inductor's code) have no
        gradient, as in a pipeline stage's artifact that trains."""
        self._runner = runner
        self.env = env
        self._recorded = recorded
        self._readers_left = list(runner.readers)

    def run_region(self, index: int) -> None:
        """Runs region `index`; the regions before it must have run."""
        kernel = self._runner.kernels[index]
        env = self.env
        forward = kernel.module.forward if self._recorded else kernel.forward
        outputs = forward(*[env[slot] for slot in kernel.in_slots])
        for slot, value in zip(kernel.out_slots, outputs):
            env[slot] = value
        for slot in kernel.transient_in_slots:  # the last reader frees the value
            self._readers_left[slot] -= 1
            if self._readers_left[slot] == 0:
                env[slot] = None

    def finish(self, grad: bool = False) -> Any:
        """Applies buffer mutations and assembles the user's output structure (keeping
        its autograd history with `grad`)."""
        env = self.env
        update_buffers(self._runner.mutations, [env[slot] for slot, _ in self._runner.mutations])
        flat = [env[slot] if slot is not None else constant for slot, constant in self._runner.outputs]
        outputs = pytree.tree_unflatten(self._runner.as_eager_lays_out(flat), self._runner.out_spec)
        return outputs if grad else detach_outputs(outputs)


def update_buffers(mutations: list[tuple[int, torch.Tensor]], values: list[Any]) -> None:
    """Writes a call's new buffer values (running statistics, a copy of a cache a device
    wrote) into the model's buffers, but those written in place already (the buffer
    itself, or None: a device's copy of it, runtime/held_weights.py); an update is not
    part of what autograd differentiates."""
    with torch.no_grad():
        for (_, buffer), value in zip(mutations, values):
            if value is not None and value is not buffer:
                buffer.copy_(value)


def _memory_format(node: fx.Node) -> torch.memory_format | None:
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor) or not all(isinstance(d, int) for d in value.shape):
        return None
    if value.is_contiguous():
        return torch.contiguous_format
    return torch.channels_last if value.dim() == 4 and value.is_contiguous(memory_format=torch.channels_last) else None


def _tensor_meta(node: fx.Node) -> tuple[torch.dtype, tuple[int, ...]] | None:
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor) and all(isinstance(d, int) for d in value.shape):
        return value.dtype, tuple(value.shape)
    return None


def detach_outputs(outputs: Any) -> Any:
    """The outputs with every tensor that requires grad (a returned parameter) detached."""
    if isinstance(outputs, torch.Tensor):
        return outputs.detach() if outputs.requires_grad else outputs
    return pytree.tree_map_only(torch.Tensor, lambda t: t.detach() if t.requires_grad else t, outputs)
